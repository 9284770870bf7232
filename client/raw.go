package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Raw is the HTTP API of the cluster, one method per endpoint (docs/api.md), on the
// connections, retries and leader routing of the Client it comes from. It is for tools,
// operators and tests. Nothing made through it is managed: a session it creates is never
// renewed, and a lock it acquires is never withdrawn or released for you; Session, Mutex and
// Election do that. Get it with Client.Raw.
type Raw struct {
	c *Client
}

// ReadOption changes how a read is answered.
type ReadOption func(*readOptions)

type readOptions struct {
	stale    bool
	endpoint string
	longPoll bool // WatchPrefix: the long poll, not a stream (LongPoll)
}

// Stale answers a read from the node asked, without contacting the leader. Stale reads go to
// the first endpoint the client was given (the next one after a failure), not to the leader's,
// so that they take load off the leader: list a nearby node first.
func Stale() ReadOption { return func(o *readOptions) { o.stale = true } }

// AtEndpoint sends the read to one endpoint only, with no failover (e.g. to ask each member).
func AtEndpoint(ep string) ReadOption { return func(o *readOptions) { o.endpoint = ep } }

func (c *Client) readCall(path string, out any, opts []ReadOption) *call {
	var o readOptions
	for _, opt := range opts {
		opt(&o)
	}
	cl := &call{method: http.MethodGet, path: path, out: out, query: url.Values{}, endpoint: o.endpoint}
	if o.stale {
		cl.stale = true
		cl.query.Set("consistency", "stale")
	}
	return cl
}

func lockPath(name, action string) (string, error) {
	if name == "" {
		return "", errorf("%w: empty lock name", ErrInvalidArgument)
	}
	p := "/v1/locks/" + name
	if action != "" {
		p += "/" + action
	}
	return p, nil
}

func sessionPath(id, action string) (string, error) {
	if id == "" {
		return "", errorf("%w: empty session id", ErrInvalidArgument)
	}
	p := "/v1/sessions/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p, nil
}

// CreateSession creates a session (POST /v1/sessions) that nothing renews: it expires after
// its TTL unless renewed with RenewSession. Client.NewSession creates one and keeps it alive.
func (r *Raw) CreateSession(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	return r.c.createSession(ctx, req)
}

func (c *Client) createSession(ctx context.Context, req api.CreateSessionRequest) (*api.Session, error) {
	var s api.Session
	_, err := c.do(ctx, &call{method: http.MethodPost, path: "/v1/sessions", body: req, out: &s})
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// RenewSession renews a session once (PUT /v1/sessions/{id}/renew).
func (r *Raw) RenewSession(ctx context.Context, id string) (*api.RenewResponse, error) {
	p, err := sessionPath(id, "renew")
	if err != nil {
		return nil, err
	}
	var resp api.RenewResponse
	if _, err := r.c.do(ctx, &call{method: http.MethodPut, path: p, out: &resp}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// RenewSessions renews up to 1000 sessions in one request (POST /v1/sessions/renew). Sessions
// made with Client.NewSession are already renewed this way, together with the client's others.
func (r *Raw) RenewSessions(ctx context.Context, ids []string) (*api.RenewSessionsResponse, error) {
	return r.c.renewSessions(ctx, ids, 0)
}

// renewSessions is RenewSessions with a timeout of each attempt (0: the client's).
func (c *Client) renewSessions(ctx context.Context, ids []string, attempt time.Duration) (*api.RenewSessionsResponse, error) {
	var resp api.RenewSessionsResponse
	cl := &call{method: http.MethodPost, path: "/v1/sessions/renew", body: api.RenewSessionsRequest{IDs: ids},
		out: &resp, attemptTimeout: attempt}
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &resp, nil
}

// DestroySession destroys a session and releases its locks (DELETE /v1/sessions/{id}).
func (r *Raw) DestroySession(ctx context.Context, id string) (*api.DestroyResponse, error) {
	return r.c.destroySession(ctx, id)
}

func (c *Client) destroySession(ctx context.Context, id string) (*api.DestroyResponse, error) {
	p, err := sessionPath(id, "")
	if err != nil {
		return nil, err
	}
	var resp api.DestroyResponse
	if _, err := c.do(ctx, &call{method: http.MethodDelete, path: p, out: &resp}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// GetSession reads one session with the locks it holds (GET /v1/sessions/{id}).
func (r *Raw) GetSession(ctx context.Context, id string, opts ...ReadOption) (*api.SessionInfo, error) {
	p, err := sessionPath(id, "")
	if err != nil {
		return nil, err
	}
	var s api.SessionInfo
	if _, err := r.c.do(ctx, r.c.readCall(p, &s, opts)); err != nil {
		return nil, err
	}
	return &s, nil
}

// Sessions lists all sessions (GET /v1/sessions).
func (r *Raw) Sessions(ctx context.Context, opts ...ReadOption) ([]api.SessionInfo, error) {
	var l api.SessionList
	if _, err := r.c.do(ctx, r.c.readCall("/v1/sessions", &l, opts)); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// Acquire asks for a lock once (POST /v1/locks/{name}/acquire); with req.Wait the server
// holds the request until the grant or the end of the wait. Retrying is safe: an acquire by
// the holder returns its token again and a queued session keeps its place. Asking with
// req.TTL instead of req.Session is not retried, since each attempt would create a session.
// A request that gave up may still be queued or granted: Mutex withdraws its attempts, a
// caller of Acquire must do so itself (CancelAcquire, Release).
func (r *Raw) Acquire(ctx context.Context, name string, req api.AcquireRequest) (*api.AcquireResponse, error) {
	resp, _, err := r.c.acquire(ctx, name, req)
	return resp, err
}

// acquire is Acquire that also tells how many of its requests may have reached a server.
func (c *Client) acquire(ctx context.Context, name string, req api.AcquireRequest) (*api.AcquireResponse, outcome, error) {
	p, err := lockPath(name, "acquire")
	if err != nil {
		return nil, outcome{}, err
	}
	var wait time.Duration
	if req.Wait != "" {
		if wait, err = time.ParseDuration(req.Wait); err != nil {
			return nil, outcome{}, errorf("%w: wait %q: %w", ErrInvalidArgument, req.Wait, err)
		}
	}
	cl := &call{method: http.MethodPost, path: p, body: req, wait: wait}
	var resp api.AcquireResponse
	cl.out = &resp
	if req.Session == "" {
		cl.noRetryUnknown = true
		cl.endpoint = c.endpoints[c.current()]
	}
	out, err := c.do(ctx, cl)
	if err != nil {
		return nil, out, err
	}
	return &resp, out, nil
}

// CancelAcquire takes session out of the lock's queue (DELETE /v1/locks/{name}/acquire), for
// a caller that gave up waiting while a request of its may still wait somewhere. A grant that
// came first is reported (Held, Token), not undone: release it if it is no longer wanted. A
// non-empty attempt (the AcquireRequest's) also makes the session's later acquires with that
// attempt fail with ErrAttemptCancelled, so that a request still on its way cannot be granted
// after the cancel. Retrying is safe.
func (r *Raw) CancelAcquire(ctx context.Context, name, session, attempt string) (*api.CancelAcquireResponse, error) {
	return r.c.cancelAcquire(ctx, name, session, attemptFields{id: attempt})
}

// cancelAcquire is CancelAcquire with the attempt fields of a numbered try.
func (c *Client) cancelAcquire(ctx context.Context, name, session string, a attemptFields) (*api.CancelAcquireResponse, error) {
	p, err := lockPath(name, "acquire")
	if err != nil {
		return nil, err
	}
	if session == "" {
		return nil, errorf("%w: empty session id", ErrInvalidArgument)
	}
	var resp api.CancelAcquireResponse
	q := url.Values{"session": {session}}
	if a.id != "" {
		q.Set("attempt", a.id)
	}
	if a.seq != 0 {
		q.Set("attempt_seq", strconv.FormatUint(a.seq, 10))
	}
	if a.floor != 0 {
		q.Set("attempt_floor", strconv.FormatUint(a.floor, 10))
	}
	cl := &call{method: http.MethodDelete, path: p, query: q, out: &resp}
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Release releases a lock held by session under token (POST /v1/locks/{name}/release).
// When the outcome of an attempt is unknown (503 timeout, or a retry after a lost answer), it
// reads the lock to learn whether the release happened, and asks again only if it did not.
// It returns nil once the lock is no longer held by that session under that token.
func (r *Raw) Release(ctx context.Context, name, session string, token uint64) error {
	return r.c.releaseAttempt(ctx, name, session, token, attemptFields{})
}

// ForceRelease is an operator's forced release of the lock's grant under token, whoever holds
// it (POST /v1/locks/{name}/release with "force": true; operator:write under ACLs, feature
// force-release): the holding session ends, and every lock it held stays unavailable for its
// TTL plus its lock-delay, so that its client stops believing it holds them before anyone else
// is granted one. ErrNotHolder means no grant of the lock has that token. It is not retried
// once it may have been applied: after ErrTimeout, read the lock to learn the outcome.
func (r *Raw) ForceRelease(ctx context.Context, name string, token uint64) (*api.ReleaseResponse, error) {
	p, err := lockPath(name, "release")
	if err != nil {
		return nil, err
	}
	var resp api.ReleaseResponse
	req := api.ReleaseRequest{Token: &token, Force: true}
	if _, err := r.c.do(ctx, &call{method: http.MethodPost, path: p, body: req, out: &resp, noRetryUnknown: true}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// ReleaseAttempt is Release that also names the attempt (the AcquireRequest's) whose acquire
// won the lock. The server fences that attempt as CancelAcquire does, so that a request of it
// still on its way (a retry, or a long poll the network delayed) cannot queue the session or
// take the lock again after the release; the fence is recorded even if the release itself
// finds the lock no longer held.
func (r *Raw) ReleaseAttempt(ctx context.Context, name, session string, token uint64, attempt string) error {
	return r.c.releaseAttempt(ctx, name, session, token, attemptFields{id: attempt})
}

// releaseAttempt is ReleaseAttempt with the attempt fields of a numbered try.
func (c *Client) releaseAttempt(ctx context.Context, name, session string, token uint64, a attemptFields) error {
	return c.release(ctx, name, api.ReleaseRequest{Session: session, Token: &token, Attempt: a.id,
		AttemptSeq: a.seq, AttemptFloor: a.floor})
}

func (c *Client) release(ctx context.Context, name string, req api.ReleaseRequest) error {
	p, err := lockPath(name, "release")
	if err != nil {
		return err
	}
	for round := 0; ; round++ {
		out, err := c.do(ctx, &call{method: http.MethodPost, path: p, body: req,
			out: &api.ReleaseResponse{}, noRetryUnknown: true})
		if err == nil {
			return nil
		}
		unknown := errors.Is(err, ErrTimeout) || (out.ambiguous && errors.Is(err, ErrNotHolder))
		if !unknown || round >= 4 {
			return err
		}
		l, gerr := c.GetLock(ctx, name)
		if gerr != nil {
			return errorf("%w (reading the lock to learn the outcome: %w)", err, gerr)
		}
		if !heldUnder(l, req.Session, *req.Token) {
			return nil
		}
		c.logger.Debug("release outcome unknown and lock still held; asking again", "lock", name)
	}
}

// heldUnder reports whether the lock l read is held by session under token: by its (newest)
// holder, or by any of its holders when it lists them (a semaphore, shared holds).
func heldUnder(l *api.Lock, session string, token uint64) bool {
	if !l.Held {
		return false
	}
	for _, h := range l.Holders {
		if h.Session == session && h.Token == token {
			return true
		}
	}
	return l.Session == session && l.Token == token
}

// GetLock reads the state of a lock (GET /v1/locks/{name}); a lock never taken reads as not
// held. Reads are linearizable unless Stale is given.
func (c *Client) GetLock(ctx context.Context, name string, opts ...ReadOption) (*api.Lock, error) {
	return c.watchLock(ctx, name, 0, 0, opts)
}

// WatchLock reads a lock (GET /v1/locks/{name}) with a blocking query: it returns when the
// lock's modify_index exceeds index, or after wait with the current state. Index 0 answers at
// once, as Client.GetLock. Client.Observe follows a lock's holders this way.
func (r *Raw) WatchLock(ctx context.Context, name string, index uint64, wait time.Duration, opts ...ReadOption) (*api.Lock, error) {
	return r.c.watchLock(ctx, name, index, wait, opts)
}

func (c *Client) watchLock(ctx context.Context, name string, index uint64, wait time.Duration, opts []ReadOption) (*api.Lock, error) {
	p, err := lockPath(name, "")
	if err != nil {
		return nil, err
	}
	var l api.Lock
	cl := c.readCall(p, &l, opts)
	if index > 0 {
		cl.query.Set("index", strconv.FormatUint(index, 10))
		cl.query.Set("wait", wait.String())
		cl.wait = wait
	}
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &l, nil
}

// Locks lists held or awaited locks whose names start with prefix (GET /v1/locks).
func (r *Raw) Locks(ctx context.Context, prefix string, opts ...ReadOption) ([]api.Lock, error) {
	var l api.LockList
	cl := r.c.readCall("/v1/locks", &l, opts)
	if prefix != "" {
		cl.query.Set("prefix", prefix)
	}
	if _, err := r.c.do(ctx, cl); err != nil {
		return nil, err
	}
	return l.Locks, nil
}

// CheckToken asks whether token is the current token of a lock (GET /v1/locks/{name}/check).
func (r *Raw) CheckToken(ctx context.Context, name string, token uint64, opts ...ReadOption) (*api.CheckResponse, error) {
	p, err := lockPath(name, "check")
	if err != nil {
		return nil, err
	}
	var resp api.CheckResponse
	cl := r.c.readCall(p, &resp, opts)
	cl.query.Set("token", strconv.FormatUint(token, 10))
	if _, err := r.c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Cluster reads the cluster's leader, term, indexes, members and enabled features
// (GET /v1/cluster).
func (r *Raw) Cluster(ctx context.Context, opts ...ReadOption) (*api.Cluster, error) {
	return r.c.cluster(ctx, opts...)
}

func (c *Client) cluster(ctx context.Context, opts ...ReadOption) (*api.Cluster, error) {
	var resp api.Cluster
	if _, err := c.do(ctx, c.readCall("/v1/cluster", &resp, opts)); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Health returns nil while the node at endpoint serves (GET /v1/health).
func (r *Raw) Health(ctx context.Context, endpoint string) error {
	_, err := r.c.do(ctx, &call{method: http.MethodGet, path: "/v1/health", endpoint: endpoint})
	return err
}

// Ready returns nil when the node at endpoint knows a leader and has applied the log up to the
// commit index it knows (GET /v1/ready).
func (r *Raw) Ready(ctx context.Context, endpoint string) error {
	_, err := r.c.do(ctx, &call{method: http.MethodGet, path: "/v1/ready", endpoint: endpoint})
	return err
}
