package client

import (
	"context"
	"fmt"
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
		return "", fmt.Errorf("%w: bad %s %q", ErrInvalidArgument, strings.TrimSuffix(kind, "s"), name)
	}
	return "/v1/acl/" + kind + "/" + name, nil
}

// ACLBootstrap creates the cluster's first management token (POST /v1/acl/bootstrap, no token
// needed). It works once per cluster; later calls fail with ErrForbidden.
func (c *Client) ACLBootstrap(ctx context.Context) (*api.BootstrapResponse, error) {
	var r api.BootstrapResponse
	if _, err := c.do(ctx, &call{method: http.MethodPost, path: "/v1/acl/bootstrap", out: &r, noRetryUnknown: true}); err != nil {
		return nil, err
	}
	return &r, nil
}

// CreatePolicy creates a policy (POST /v1/acl/policies); a name in use fails with
// ErrAlreadyExists.
func (c *Client) CreatePolicy(ctx context.Context, p api.Policy) (*api.Policy, error) {
	var r api.Policy
	if _, err := c.do(ctx, &call{method: http.MethodPost, path: "/v1/acl/policies", body: p, out: &r, noRetryUnknown: true}); err != nil {
		return nil, err
	}
	return &r, nil
}

// PutPolicy creates or replaces the policy named p.Name (PUT /v1/acl/policies/{name}).
func (c *Client) PutPolicy(ctx context.Context, p api.Policy) (*api.Policy, error) {
	path, err := aclPath("policies", p.Name)
	if err != nil {
		return nil, err
	}
	var r api.Policy
	if _, err := c.do(ctx, &call{method: http.MethodPut, path: path, body: p, out: &r}); err != nil {
		return nil, err
	}
	return &r, nil
}

// Policy reads one policy (GET /v1/acl/policies/{name}).
func (c *Client) Policy(ctx context.Context, name string, opts ...ReadOption) (*api.Policy, error) {
	path, err := aclPath("policies", name)
	if err != nil {
		return nil, err
	}
	var r api.Policy
	if _, err := c.do(ctx, c.readCall(path, &r, opts)); err != nil {
		return nil, err
	}
	return &r, nil
}

// Policies lists the policies, the built-in management policy included (GET /v1/acl/policies).
func (c *Client) Policies(ctx context.Context, opts ...ReadOption) ([]api.Policy, error) {
	var r api.PolicyList
	if _, err := c.do(ctx, c.readCall("/v1/acl/policies", &r, opts)); err != nil {
		return nil, err
	}
	return r.Policies, nil
}

// DeletePolicy deletes a policy and takes it out of every token (DELETE /v1/acl/policies/{name}).
func (c *Client) DeletePolicy(ctx context.Context, name string) error {
	path, err := aclPath("policies", name)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, &call{method: http.MethodDelete, path: path, out: &api.DeleteResponse{}})
	return err
}

// CreateToken creates a token (POST /v1/acl/tokens); the answer holds its secret, which no
// other answer ever shows.
func (c *Client) CreateToken(ctx context.Context, req api.CreateTokenRequest) (*api.NewToken, error) {
	if req.Policies == nil {
		req.Policies = []string{}
	}
	var r api.NewToken
	if _, err := c.do(ctx, &call{method: http.MethodPost, path: "/v1/acl/tokens", body: req, out: &r, noRetryUnknown: true}); err != nil {
		return nil, err
	}
	return &r, nil
}

// Token reads one token, without its secret (GET /v1/acl/tokens/{accessor_id}).
func (c *Client) Token(ctx context.Context, accessorID string, opts ...ReadOption) (*api.Token, error) {
	path, err := aclPath("tokens", accessorID)
	if err != nil {
		return nil, err
	}
	var r api.Token
	if _, err := c.do(ctx, c.readCall(path, &r, opts)); err != nil {
		return nil, err
	}
	return &r, nil
}

// TokenSelf reads the client's own token (GET /v1/acl/token/self).
func (c *Client) TokenSelf(ctx context.Context, opts ...ReadOption) (*api.Token, error) {
	var r api.Token
	if _, err := c.do(ctx, c.readCall("/v1/acl/token/self", &r, opts)); err != nil {
		return nil, err
	}
	return &r, nil
}

// Tokens lists the tokens, without their secrets (GET /v1/acl/tokens).
func (c *Client) Tokens(ctx context.Context, opts ...ReadOption) ([]api.Token, error) {
	var r api.TokenList
	if _, err := c.do(ctx, c.readCall("/v1/acl/tokens", &r, opts)); err != nil {
		return nil, err
	}
	return r.Tokens, nil
}

// DeleteToken deletes a token (DELETE /v1/acl/tokens/{accessor_id}); every node refuses it
// once this returns. Its sessions stay until they expire.
func (c *Client) DeleteToken(ctx context.Context, accessorID string) error {
	path, err := aclPath("tokens", accessorID)
	if err != nil {
		return err
	}
	_, err = c.do(ctx, &call{method: http.MethodDelete, path: path, out: &api.DeleteResponse{}})
	return err
}
