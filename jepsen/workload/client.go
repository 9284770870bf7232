package workload

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// Endpoint is one node's HTTP address.
type Endpoint struct {
	// ID is the node id, recorded with each op.
	ID string
	// Addr is host:port.
	Addr string
}

// Client performs single HTTP requests against the nodes and records each as one op.
type Client struct {
	rec       *history.Recorder
	endpoints []Endpoint
	hc        *http.Client
	opTimeout time.Duration // bounds a request that does not wait; a waiting acquire adds its wait
	cfg       Config        // its TLS and tokens
}

// NewClient returns a client that records into rec; cfg.OpTimeout bounds each request that
// does not wait, cfg.TLS and cfg.Tokens secure them. Keep-alives are off so that a request is
// never silently retried on a reused connection, and every dial failure is definite.
func NewClient(rec *history.Recorder, endpoints []Endpoint, cfg Config) *Client {
	tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: cfg.TLS.Clone()}
	return &Client{rec: rec, endpoints: endpoints, hc: &http.Client{Transport: tr}, opTimeout: cfg.OpTimeout,
		cfg: cfg}
}

// Endpoints are the nodes the client talks to.
func (c *Client) Endpoints() []Endpoint { return c.endpoints }

// request is one HTTP call.
type request struct {
	method  string
	path    string
	body    any
	out     any
	timeout time.Duration
}

// exec performs the request against ep and returns op with its times and outcome; the caller
// adds what it decoded and records it.
func (c *Client) exec(ctx context.Context, ep Endpoint, op history.Op, r request) history.Op {
	op.Node = ep.ID
	op.Invoke = c.rec.Now()
	if r.timeout == 0 {
		r.timeout = c.opTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			op.Type, op.Error = history.Fail, "encode: "+err.Error()
			return op
		}
		body = bytes.NewReader(b)
	}
	var sent atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			sent.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), r.method, c.cfg.scheme()+"://"+ep.Addr+r.path, body)
	if err != nil {
		op.Type, op.Error = history.Fail, err.Error()
		return op
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok := c.cfg.token(op.Process); tok != "" {
		req.Header.Set(api.HeaderToken, tok)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		op.Complete = c.rec.Now()
		// A request never fully written cannot have been acted on.
		op.Type, op.Error = history.Fail, "not sent: "+err.Error()
		if sent.Load() {
			op.Type, op.Error = history.Info, err.Error()
		}
		return op
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	op.Complete = c.rec.Now()
	op.Status = resp.StatusCode
	if l := resp.Header.Get(api.HeaderLeader); r.method == http.MethodGet && resp.StatusCode == http.StatusOK && l != "" && l != ep.ID {
		op.AtFollower = true
	}
	if err != nil {
		op.Type, op.Error = history.Info, "read body: "+err.Error()
		return op
	}
	classify(&op, resp.StatusCode, b, r.out)
	return op
}

// classify sets the op's outcome from the response.
func classify(op *history.Op, status int, body []byte, out any) {
	if status/100 == 2 {
		op.Type = history.OK
		if out != nil {
			if err := json.Unmarshal(body, out); err != nil {
				op.Type, op.Error = history.Info, "decode: "+err.Error()
			}
		}
		return
	}
	var e api.ErrorBody
	if err := json.Unmarshal(body, &e); err != nil {
		op.Error = fmt.Sprintf("undecodable error body: %.200q", body)
	}
	op.Code = e.Error.Code
	if op.Error == "" {
		op.Error = e.Error.Message
	}
	if e.Holder != nil {
		op.OutSession, op.OutToken = e.Holder.Session, e.Holder.Token
	}
	switch {
	case status == http.StatusServiceUnavailable && op.Code == api.CodeNoLeader:
		op.Type = history.Fail // nothing was applied
	case status >= 500:
		op.Type = history.Info // 503 timeout, or a failure we cannot interpret: unknown
	default:
		op.Type = history.Fail
	}
}

// CreateSession creates a session with the TTL and lock-delay; on ok, op.Session is its id.
func (c *Client) CreateSession(ctx context.Context, ep Endpoint, process int, ttl, lockDelay time.Duration, phase, lock string) history.Op {
	op := history.Op{Process: process, Kind: history.CreateSession, TTLNS: int64(ttl), LockDelayNS: int64(lockDelay), Phase: phase, Lock: lock}
	req := api.CreateSessionRequest{TTL: ttl.String(), Name: fmt.Sprintf("jepsen-%d", process)}
	if lockDelay > 0 {
		req.LockDelay = lockDelay.String()
	}
	var out api.Session
	op = c.exec(ctx, ep, op, request{method: http.MethodPost, path: "/v1/sessions", body: req, out: &out})
	if op.Type == history.OK {
		op.Session = out.ID
	}
	return c.rec.Add(op)
}

// Renew renews the session: with PUT /v1/sessions/{id}/renew, or with batch set through
// POST /v1/sessions/renew, whose per-session answer is recorded as the single one would be.
func (c *Client) Renew(ctx context.Context, ep Endpoint, process int, session string, timeout time.Duration, batch bool) history.Op {
	op := history.Op{Process: process, Kind: history.Renew, Session: session}
	if !batch {
		return c.rec.Add(c.exec(ctx, ep, op, request{method: http.MethodPut, path: "/v1/sessions/" + url.PathEscape(session) + "/renew",
			body: struct{}{}, out: &api.RenewResponse{}, timeout: timeout}))
	}
	var out api.RenewSessionsResponse
	op = c.exec(ctx, ep, op, request{method: http.MethodPost, path: "/v1/sessions/renew",
		body: api.RenewSessionsRequest{IDs: []string{session}}, out: &out, timeout: timeout})
	if op.Type == history.OK {
		switch {
		case slices.ContainsFunc(out.Renewed, func(r api.RenewResponse) bool { return r.ID == session }):
		case slices.Contains(out.NotFound, session):
			op.Type, op.Code, op.Error = history.Fail, api.CodeSessionNotFound, "batch renewal: not found"
		case slices.Contains(out.Unknown, session):
			op.Type, op.Code, op.Error = history.Info, api.CodeTimeout, "batch renewal: outcome unknown"
		default:
			op.Type, op.Error = history.Info, "batch renewal: the answer left the session out"
		}
	}
	return c.rec.Add(op)
}

// Destroy destroys the session.
func (c *Client) Destroy(ctx context.Context, ep Endpoint, process int, session, phase string) history.Op {
	op := history.Op{Process: process, Kind: history.Destroy, Session: session, Phase: phase}
	return c.rec.Add(c.exec(ctx, ep, op, request{method: http.MethodDelete, path: "/v1/sessions/" + url.PathEscape(session),
		out: &api.DestroyResponse{}}))
}

// Acquire asks for the lock, waiting up to wait if it is held; attempt, if set, names the try
// so that Cancel can stop it.
func (c *Client) Acquire(ctx context.Context, ep Endpoint, process int, lock, session, attempt string, wait time.Duration, phase string) history.Op {
	op := history.Op{Process: process, Kind: history.Acquire, Lock: lock, Session: session, Attempt: attempt, WaitNS: int64(wait), Phase: phase}
	req := api.AcquireRequest{Session: session, Attempt: attempt}
	if wait > 0 {
		req.Wait = wait.String()
	}
	var out api.AcquireResponse
	op = c.exec(ctx, ep, op, request{method: http.MethodPost, path: "/v1/locks/" + lock + "/acquire",
		body: req, out: &out, timeout: c.opTimeout + wait})
	if op.Type == history.OK {
		op.OutSession, op.OutToken = out.Session, out.Token
	}
	return c.rec.Add(op)
}

// Cancel cancels the session's attempt for the lock: it leaves the queue, and the attempt's
// requests still on their way are refused; a grant that came first is reported.
func (c *Client) Cancel(ctx context.Context, ep Endpoint, process int, lock, session, attempt string) history.Op {
	op := history.Op{Process: process, Kind: history.Cancel, Lock: lock, Session: session, Attempt: attempt}
	var out api.CancelAcquireResponse
	q := url.Values{"session": {session}, "attempt": {attempt}}
	op = c.exec(ctx, ep, op, request{method: http.MethodDelete, path: "/v1/locks/" + lock + "/acquire?" + q.Encode(), out: &out})
	if op.Type == history.OK && out.Held {
		op.Held, op.OutSession, op.OutToken = true, session, out.Token
	}
	return c.rec.Add(op)
}

// Release releases the lock held under token.
func (c *Client) Release(ctx context.Context, ep Endpoint, process int, lock, session string, token uint64) history.Op {
	op := history.Op{Process: process, Kind: history.Release, Lock: lock, Session: session, Token: token}
	tok := token
	return c.rec.Add(c.exec(ctx, ep, op, request{method: http.MethodPost, path: "/v1/locks/" + lock + "/release",
		body: api.ReleaseRequest{Session: session, Token: &tok}, out: &api.ReleaseResponse{}}))
}

// Read reads the lock linearizably.
func (c *Client) Read(ctx context.Context, ep Endpoint, process int, lock string) history.Op {
	return c.read(ctx, ep, history.Op{Process: process, Kind: history.Read, Lock: lock}, "", 0)
}

// ReadBlocking is a blocking read: GET /v1/locks/{name}?index=&wait=, which the server holds
// until the lock's modify_index exceeds index or wait elapses, then answers linearizably.
func (c *Client) ReadBlocking(ctx context.Context, ep Endpoint, process int, lock string, index uint64, wait time.Duration) history.Op {
	op := history.Op{Process: process, Kind: history.Read, Lock: lock, Index: index, WaitNS: int64(wait)}
	q := url.Values{"index": {fmt.Sprint(index)}, "wait": {wait.String()}}
	return c.read(ctx, ep, op, "?"+q.Encode(), c.opTimeout+wait)
}

func (c *Client) read(ctx context.Context, ep Endpoint, op history.Op, query string, timeout time.Duration) history.Op {
	var out api.Lock
	op = c.exec(ctx, ep, op, request{method: http.MethodGet, path: "/v1/locks/" + op.Lock + query, out: &out, timeout: timeout})
	if op.Type == history.OK {
		op.Held, op.OutIndex = out.Held, out.ModifyIndex
		if out.Held {
			op.OutSession, op.OutToken = out.Session, out.Token
		}
	}
	return c.rec.Add(op)
}

// ReadTable reads every lock at once (GET /v1/locks, linearizable: a follower asks the leader)
// and records one read per lock of locks, all with the request's interval, Detail "lock table";
// a lock the table leaves out is free. One request is then several ops, one per lock, since each
// lock's history is judged on its own.
func (c *Client) ReadTable(ctx context.Context, ep Endpoint, process int, locks []string) []history.Op {
	var out api.LockList
	op := c.exec(ctx, ep, history.Op{Process: process, Kind: history.Read, Detail: "lock table"},
		request{method: http.MethodGet, path: "/v1/locks", out: &out})
	table := map[string]api.Lock{}
	for _, l := range out.Locks {
		table[l.Name] = l
	}
	ops := make([]history.Op, 0, len(locks))
	for _, name := range locks {
		o := op
		o.Lock = name
		if l, ok := table[name]; ok && o.Type == history.OK {
			o.Held, o.OutIndex = l.Held, l.ModifyIndex
			if l.Held {
				o.OutSession, o.OutToken = l.Session, l.Token
			}
		}
		ops = append(ops, c.rec.Add(o))
	}
	return ops
}
