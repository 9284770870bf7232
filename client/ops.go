package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
)

// snapshotTimeout bounds one attempt of a backup or a restore; the caller's context ends it
// sooner.
const snapshotTimeout = time.Hour

// SaveSnapshot writes a backup file of the cluster's state to w (GET /v1/snapshot): the
// leader's state, holding everything acknowledged before the call. Under ACL it needs the
// management policy. w may hold part of a file when an error is returned; check a saved file
// before relying on it (raftlock snapshot inspect).
func (r *Raw) SaveSnapshot(ctx context.Context, w io.Writer, opts ...ReadOption) error {
	cl := r.c.readCall("/v1/snapshot", nil, opts)
	cl.download, cl.attemptTimeout = w, snapshotTimeout
	_, err := r.c.do(ctx, cl)
	return err
}

// RestoreOptions tune RestoreSnapshot.
type RestoreOptions struct {
	// IndexGap, if set, is how far past every log index known the restored state's index
	// goes; nil leaves the server's default (docs/operations.md).
	IndexGap *uint64
	// ACL, if set, says whose ACL state the cluster has after the restore: "keep" (the
	// cluster's own tokens and policies) or "replace" (the backup's, even none). Unset, a
	// backup without ACL state is refused by a cluster whose ACLs are bootstrapped.
	ACL string
}

// RestoreSnapshot replaces the whole state of the cluster with the backup file (PUT
// /v1/snapshot), read from its start for each attempt. Under ACL it needs the management
// policy; the tokens and policies afterwards are the backup's.
func (r *Raw) RestoreSnapshot(ctx context.Context, file io.ReadSeeker, opts RestoreOptions) (*api.RestoreResponse, error) {
	var res api.RestoreResponse
	cl := &call{method: http.MethodPut, path: "/v1/snapshot", query: url.Values{}, out: &res,
		attemptTimeout: snapshotTimeout, noRetryUnknown: true,
		upload: func() (io.Reader, error) {
			_, err := file.Seek(0, io.SeekStart)
			// Only its reads: the HTTP transport closes a body that can be closed once it is
			// sent or has failed, and a file closed by the first attempt cannot be read again.
			return struct{ io.Reader }{file}, err
		}}
	if opts.IndexGap != nil {
		cl.query.Set("index_gap", strconv.FormatUint(*opts.IndexGap, 10))
	}
	if opts.ACL != "" {
		cl.query.Set("acl", opts.ACL)
	}
	if _, err := r.c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &res, nil
}

// AddMember adds a member (POST /v1/cluster/members): a voter, or with req.Suffrage
// api.SuffrageNonvoter a non-voter, to promote later with PromoteMember.
func (r *Raw) AddMember(ctx context.Context, req api.AddMemberRequest) (*api.MembersResponse, error) {
	var res api.MembersResponse
	if _, err := r.c.do(ctx, &call{method: http.MethodPost, path: "/v1/cluster/members", body: req, out: &res}); err != nil {
		return nil, err
	}
	return &res, nil
}

// PromoteMember makes a non-voter a voter (POST /v1/cluster/members/{id}/promote) once it has
// caught up; until then it fails with an *APIError of code api.CodeNotCaughtUp.
func (r *Raw) PromoteMember(ctx context.Context, id string) (*api.MembersResponse, error) {
	return r.memberCall(ctx, http.MethodPost, id, "/promote")
}

// RemoveMember removes a member (DELETE /v1/cluster/members/{id}).
func (r *Raw) RemoveMember(ctx context.Context, id string) (*api.MembersResponse, error) {
	return r.memberCall(ctx, http.MethodDelete, id, "")
}

func (r *Raw) memberCall(ctx context.Context, method, id, action string) (*api.MembersResponse, error) {
	if id == "" {
		return nil, errorf("%w: empty member id", ErrInvalidArgument)
	}
	var res api.MembersResponse
	p := "/v1/cluster/members/" + id + action
	if _, err := r.c.do(ctx, &call{method: method, path: p, out: &res}); err != nil {
		return nil, err
	}
	return &res, nil
}

// TransferLeadership asks the leader to hand over to the member id, or to the most
// up-to-date follower when id is empty (POST /v1/cluster/leadership-transfer).
func (r *Raw) TransferLeadership(ctx context.Context, id string) (*api.TransferResponse, error) {
	var res api.TransferResponse
	cl := &call{method: http.MethodPost, path: "/v1/cluster/leadership-transfer", body: api.TransferRequest{ID: id}, out: &res}
	if _, err := r.c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &res, nil
}
