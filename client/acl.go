package client

import (
	"context"
	"net/http"
	"strings"

	"github.com/raftlock/raftlock/api"
)

// The methods in this file map one to one onto the ACL endpoints (docs/acl.md). Requests that
// create something are not asked again after an unknown outcome: a second token or bootstrap
// would be made, or refused, and the first one's secret lost.

// WithToken sends secret as the token of every request (X-Raftlock-Token), for clusters
// started with --acl.
func WithToken(secret string) Option {
	return func(o *clientOptions) { o.token = secret }
}

func aclPath(kind, name string) (string, error) {
	if name == "" || strings.ContainsAny(name, "/?#") {
		return "", errorf("%w: bad %s %q", ErrInvalidArgument, strings.TrimSuffix(kind, "s"), name)
	}
	return "/v1/acl/" + kind + "/" + name, nil
}

// ACLBootstrap creates the cluster's first management token (POST /v1/acl/bootstrap, no token
// needed). It works once per cluster; later calls fail with ErrForbidden.
func (r *Raw) ACLBootstrap(ctx context.Context) (*api.BootstrapResponse, error) {
	var resp api.BootstrapResponse
	if _, err := r.c.do(ctx, &call{method: http.MethodPost, path: "/v1/acl/bootstrap", out: &resp, noRetryUnknown: true}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// CreatePolicy creates a policy (POST /v1/acl/policies); a name in use fails with
// ErrAlreadyExists.
func (r *Raw) CreatePolicy(ctx context.Context, p api.Policy) (*api.Policy, error) {
	var resp api.Policy
	if _, err := r.c.do(ctx, &call{method: http.MethodPost, path: "/v1/acl/policies", body: p, out: &resp, noRetryUnknown: true}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// PutPolicy creates or replaces the policy named p.Name (PUT /v1/acl/policies/{name}).
func (r *Raw) PutPolicy(ctx context.Context, p api.Policy) (*api.Policy, error) {
	path, err := aclPath("policies", p.Name)
	if err != nil {
		return nil, err
	}
	var resp api.Policy
	if _, err := r.c.do(ctx, &call{method: http.MethodPut, path: path, body: p, out: &resp}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Policy reads one policy (GET /v1/acl/policies/{name}).
func (r *Raw) Policy(ctx context.Context, name string, opts ...ReadOption) (*api.Policy, error) {
	path, err := aclPath("policies", name)
	if err != nil {
		return nil, err
	}
	var resp api.Policy
	if _, err := r.c.do(ctx, r.c.readCall(path, &resp, opts)); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Policies lists the policies, the built-in management policy included (GET /v1/acl/policies).
func (r *Raw) Policies(ctx context.Context, opts ...ReadOption) ([]api.Policy, error) {
	var resp api.PolicyList
	if _, err := r.c.do(ctx, r.c.readCall("/v1/acl/policies", &resp, opts)); err != nil {
		return nil, err
	}
	return resp.Policies, nil
}

// DeletePolicy deletes a policy and takes it out of every token (DELETE /v1/acl/policies/{name}).
func (r *Raw) DeletePolicy(ctx context.Context, name string) error {
	path, err := aclPath("policies", name)
	if err != nil {
		return err
	}
	_, err = r.c.do(ctx, &call{method: http.MethodDelete, path: path, out: &api.DeleteResponse{}})
	return err
}

// CreateToken creates a token (POST /v1/acl/tokens); the answer holds its secret, which no
// other answer ever shows.
func (r *Raw) CreateToken(ctx context.Context, req api.CreateTokenRequest) (*api.NewToken, error) {
	if req.Policies == nil {
		req.Policies = []string{}
	}
	var resp api.NewToken
	if _, err := r.c.do(ctx, &call{method: http.MethodPost, path: "/v1/acl/tokens", body: req, out: &resp, noRetryUnknown: true}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Token reads one token, without its secret (GET /v1/acl/tokens/{accessor_id}).
func (r *Raw) Token(ctx context.Context, accessorID string, opts ...ReadOption) (*api.Token, error) {
	path, err := aclPath("tokens", accessorID)
	if err != nil {
		return nil, err
	}
	var resp api.Token
	if _, err := r.c.do(ctx, r.c.readCall(path, &resp, opts)); err != nil {
		return nil, err
	}
	return &resp, nil
}

// TokenSelf reads the client's own token (GET /v1/acl/token/self).
func (r *Raw) TokenSelf(ctx context.Context, opts ...ReadOption) (*api.Token, error) {
	var resp api.Token
	if _, err := r.c.do(ctx, r.c.readCall("/v1/acl/token/self", &resp, opts)); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Tokens lists the tokens, without their secrets (GET /v1/acl/tokens).
func (r *Raw) Tokens(ctx context.Context, opts ...ReadOption) ([]api.Token, error) {
	var resp api.TokenList
	if _, err := r.c.do(ctx, r.c.readCall("/v1/acl/tokens", &resp, opts)); err != nil {
		return nil, err
	}
	return resp.Tokens, nil
}

// DeleteToken deletes a token (DELETE /v1/acl/tokens/{accessor_id}); every node refuses it
// once this returns. Its sessions stay until they expire.
func (r *Raw) DeleteToken(ctx context.Context, accessorID string) error {
	path, err := aclPath("tokens", accessorID)
	if err != nil {
		return err
	}
	_, err = r.c.do(ctx, &call{method: http.MethodDelete, path: path, out: &api.DeleteResponse{}})
	return err
}
