package client

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
)

const (
	// maxRenewBatch is the most session ids one POST /v1/sessions/renew carries (the
	// server's default limit).
	maxRenewBatch = 1000
	// renewLinger is the least time between two batches of a client: renewals that fall due
	// within it share a request. A renewal waits at most this long, which a session's safety
	// margin (TTL/5, at least 400ms) covers many times over.
	renewLinger = 20 * time.Millisecond
)

// renewer sends the renewals of a client's sessions together, as Nagle's algorithm does with
// small writes: a renewal goes out at once unless a batch left less than renewLinger ago, and
// then it waits for the next batch. A process with 100,000 sessions at a 10s TTL then sends
// about 50 requests a second instead of 30,000, and the server confirms its leadership once
// for each request.
type renewer struct {
	c *Client
	// single is set once the server refused the batch endpoint (a v1 server without it):
	// renewals are then sent one by one, as PUT /v1/sessions/{id}/renew.
	single atomic.Bool

	mu        sync.Mutex
	queue     []*renewCall
	scheduled bool      // a flush is due
	lastFlush time.Time // when the last batch left
}

// renewCall is one session's renewal waiting for its batch.
type renewCall struct {
	id       string
	deadline time.Time     // after it the answer is useless (the session's local deadline)
	attempt  time.Duration // timeout of one attempt
	done     chan error    // receives the outcome; buffered
}

// renew renews session id through the next batch. It returns nil when the server renewed it,
// an error matching ErrSessionNotFound when the server does not know it, and other errors
// (ErrTimeout when its expiry was in flight) when the outcome is not known.
func (r *renewer) renew(ctx context.Context, id string, attempt time.Duration) error {
	if r.single.Load() {
		return r.renewOne(ctx, id, attempt)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(r.c.retryTimeout)
	}
	call := &renewCall{id: id, deadline: deadline, attempt: attempt, done: make(chan error, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, call)
	if !r.scheduled {
		r.scheduled = true
		if wait := time.Until(r.lastFlush.Add(renewLinger)); wait > 0 {
			time.AfterFunc(wait, r.flush)
		} else {
			go r.flush()
		}
	}
	r.mu.Unlock()
	select {
	case err := <-call.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flush sends everything queued, in batches of at most maxRenewBatch.
func (r *renewer) flush() {
	r.mu.Lock()
	queue := r.queue
	r.queue = nil
	r.scheduled = false
	r.lastFlush = time.Now()
	r.mu.Unlock()
	for len(queue) > 0 {
		n := min(len(queue), maxRenewBatch)
		go r.send(queue[:n:n])
		queue = queue[n:]
	}
}

// send renews one batch and hands every call its outcome.
func (r *renewer) send(batch []*renewCall) {
	now := time.Now()
	live := batch[:0]
	var deadline time.Time
	attempt := time.Duration(0)
	for _, c := range batch {
		if !now.Before(c.deadline) {
			c.done <- context.DeadlineExceeded
			continue
		}
		live = append(live, c)
		if c.deadline.After(deadline) {
			deadline = c.deadline
		}
		if attempt == 0 || c.attempt < attempt {
			attempt = c.attempt
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ids := make([]string, len(live))
	for i, c := range live {
		ids[i] = c.id
	}
	resp, err := r.c.renewSessions(ctx, ids, attempt)
	if isUnsupported(err) {
		r.single.Store(true)
		for _, c := range live {
			go func() {
				ctx, cancel := context.WithDeadline(context.Background(), c.deadline)
				defer cancel()
				c.done <- r.renewOne(ctx, c.id, c.attempt)
			}()
		}
		return
	}
	if err != nil {
		for _, c := range live {
			c.done <- err
		}
		return
	}
	outcome := make(map[string]error, len(live))
	for _, rr := range resp.Renewed {
		outcome[rr.ID] = nil
	}
	for _, id := range resp.NotFound {
		outcome[id] = &APIError{StatusCode: http.StatusNotFound, Code: api.CodeSessionNotFound,
			Message: "the session does not exist or has expired"}
	}
	for _, id := range resp.Unknown {
		outcome[id] = &APIError{StatusCode: http.StatusServiceUnavailable, Code: api.CodeTimeout,
			Message: "the session's expiry is being committed; its outcome is unknown"}
	}
	for _, c := range live {
		err, ok := outcome[c.id]
		if !ok {
			err = &APIError{StatusCode: http.StatusInternalServerError, Code: api.CodeInternal,
				Message: "the server's batch renewal answer left this session out"}
		}
		c.done <- err
	}
}

// renewOne renews one session with PUT /v1/sessions/{id}/renew.
func (r *renewer) renewOne(ctx context.Context, id string, attempt time.Duration) error {
	p, err := sessionPath(id, "renew")
	if err != nil {
		return err
	}
	_, err = r.c.do(ctx, &call{method: http.MethodPut, path: p, out: &api.RenewResponse{}, attemptTimeout: attempt})
	return err
}

// isUnsupported reports whether err is the server's answer that it has no such route (404
// not_found, 405 method_not_allowed): a server of the API's first version, without the batch
// endpoint, which came before the cluster features that could otherwise say so.
func isUnsupported(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && (ae.Code == api.CodeNotFound || ae.Code == api.CodeMethodNotAllowed)
}
