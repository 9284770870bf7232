package client

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
)

// leaderRouter moves a client's requests to the endpoint of the leader. A follower forwards
// every write and linearizable read to the leader, which costs the cluster a second HTTP
// exchange per request; talking to the leader saves it.
//
// When an answer names a leader it has not looked up, the router asks every endpoint which
// node it is (GET /v1/health, which needs no token), in the background, and makes the one
// that is the leader the endpoint tried first. Endpoints that answer with no id, or none that
// is the leader, leave the order as it was.
type leaderRouter struct {
	c *Client

	// seen is the leader last looked up; read without mu on every answer.
	seen atomic.Pointer[string]

	mu        sync.Mutex
	wg        sync.WaitGroup
	ctx       context.Context // cancelled by close, under mu
	cancel    context.CancelFunc
	lookingUp bool // a lookup runs, under mu
}

func newLeaderRouter(c *Client) *leaderRouter {
	ctx, cancel := context.WithCancel(context.Background())
	return &leaderRouter{c: c, ctx: ctx, cancel: cancel}
}

// saw starts a lookup of leader id's endpoint unless it was looked up already or one runs.
func (r *leaderRouter) saw(id string) {
	if p := r.seen.Load(); p != nil && *p == id {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil || r.lookingUp {
		return
	}
	r.lookingUp = true
	r.wg.Add(1)
	go r.lookup(id)
}

func (r *leaderRouter) lookup(id string) {
	defer r.wg.Done()
	idx := r.find(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lookingUp = false
	if r.ctx.Err() != nil {
		return
	}
	r.seen.Store(&id) // also when no endpoint is the leader: do not ask again for this one
	if idx >= 0 && r.c.current() != idx {
		r.c.logger.Debug("moving to the leader's endpoint", "leader", id, "endpoint", r.c.endpoints[idx])
		r.c.cur.Store(uint64(idx))
	}
}

// find asks every endpoint for its node id and returns the index of the first that is id, or -1.
func (r *leaderRouter) find(id string) int {
	ctx, cancel := context.WithTimeout(r.ctx, leaderLookupTimeout)
	defer cancel()
	ids := make([]string, len(r.c.endpoints))
	var wg sync.WaitGroup
	for i, ep := range r.c.endpoints {
		wg.Go(func() {
			var h struct {
				ID string `json:"id"`
			}
			probe := &call{method: http.MethodGet, path: "/v1/health", out: &h}
			if err := r.c.attempt(ctx, ep, probe, nil); err != nil {
				r.c.logger.Debug("asking an endpoint which node it is", "endpoint", ep, "error", err)
				return
			}
			ids[i] = h.ID
		})
	}
	wg.Wait()
	for i, got := range ids {
		if got == id {
			return i
		}
	}
	return -1
}

// close stops a running lookup and waits for it.
func (r *leaderRouter) close() {
	r.mu.Lock()
	r.cancel()
	r.mu.Unlock()
	r.wg.Wait()
}
