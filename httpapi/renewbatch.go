package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// Session renewals at a follower go to the leader in batches: while one batch is in flight, the
// renewals arriving meanwhile wait for the next, which goes out with the batch renewal
// (POST /v1/sessions/renew, marked as forwarded) as soon as the one in flight is answered. So a
// follower sends the leader at most one request at a time per token, however many sessions
// its clients keep alive, and every renewal waits at most about two round trips. Each caller
// gets its own session's answer, as the single renewal answers it. The leader judges every
// renewal of a batch as it judges the batch renewal: with one leadership confirmation begun
// after the batch arrived, so after each of its renewals arrived at the follower.

// renewBatcher batches the renewals that reach this follower, one queue per token (under ACL
// a batch is judged by one token; "" without ACL).
type renewBatcher struct {
	s *Server

	mu     sync.Mutex
	queues map[string]*renewQueue
}

// renewQueue is one token's batch in flight and the one filling behind it.
type renewQueue struct {
	next    *renewBatch
	running bool
}

// renewBatch is one batch renewal, and its outcome for every renewal that joined it.
type renewBatch struct {
	ids  []string            // distinct, in the order they joined
	seen map[string]struct{} // ids
	done chan struct{}
	// Set when done: each id's answer, or, for the whole batch, err or fallback (each renewal
	// then goes to the leader on its own, as before).
	answers  map[string]*apiError
	ttls     map[string]string
	err      *apiError
	fallback bool
}

func newRenewBatcher(s *Server) *renewBatcher {
	return &renewBatcher{s: s, queues: make(map[string]*renewQueue)}
}

// batchesRenewal says whether the renewal is one that this node sends to the leader within a
// batch: it does not lead, the request was not forwarded to it, and under ACL this node knows
// the token (an unknown one goes to the leader on its own, which judges it).
func (s *Server) batchesRenewal(c echo.Context) bool {
	if s.node.IsLeader() || c.Request().Header.Get(api.HeaderForwarded) != "" {
		return false
	}
	return !s.cfg.ACL || accessorOf(c) != ""
}

// renew renews id within a batch and answers the request; handled is false when the renewal
// must go to the leader on its own instead (the batch could not be sent as one).
func (b *renewBatcher) renew(c echo.Context, id fsm.SessionID) (handled bool, err error) {
	key := ""
	if b.s.cfg.ACL {
		key = requestSecret(c.Request())
	}
	raw := id.String()
	b.mu.Lock()
	q := b.queues[key]
	if q == nil {
		q = &renewQueue{}
		b.queues[key] = q
	}
	if q.next == nil || len(q.next.ids) >= b.s.cfg.Limits.MaxRenewBatch {
		if q.next != nil {
			// The next batch is full: this renewal goes on its own.
			b.mu.Unlock()
			return false, nil
		}
		q.next = &renewBatch{seen: make(map[string]struct{}), done: make(chan struct{})}
	}
	batch := q.next
	if _, dup := batch.seen[raw]; !dup {
		batch.seen[raw] = struct{}{}
		batch.ids = append(batch.ids, raw)
	}
	if !q.running {
		q.running = true
		q.next = nil
		go b.run(key, q, batch, c.Request().Header.Clone())
	}
	b.mu.Unlock()
	select {
	case <-batch.done:
	case <-c.Request().Context().Done():
		return true, fromClusterError(fmt.Errorf("%w: the client left", cluster.ErrUnknownOutcome))
	}
	switch {
	case batch.fallback:
		return false, nil
	case batch.err != nil:
		return true, batch.err
	}
	if e := batch.answers[raw]; e != nil {
		return true, e
	}
	return true, c.JSON(http.StatusOK, api.RenewResponse{ID: raw, TTL: batch.ttls[raw]})
}

// run sends batches of key's queue one after the other, until none waits. hdr is the headers
// of the request that started it, whose token (the queue's) the batches carry.
func (b *renewBatcher) run(key string, q *renewQueue, batch *renewBatch, hdr http.Header) {
	for batch != nil {
		b.send(batch, hdr)
		close(batch.done)
		b.mu.Lock()
		batch, q.next = q.next, nil
		if batch == nil {
			q.running = false
			delete(b.queues, key)
		}
		b.mu.Unlock()
	}
}

// send sends one batch to the leader and records its outcome.
func (b *renewBatcher) send(batch *renewBatch, hdr http.Header) {
	s := b.s
	id, addr := s.node.Leader()
	if id == "" || id == s.node.ID() || addr == "" {
		batch.fallback = true // no leader to send to: each renewal finds one on its own
		return
	}
	ctx, cancel := context.WithTimeout(s.closing, s.cfg.CommandTimeout)
	defer cancel()
	body, err := json.Marshal(api.RenewSessionsRequest{IDs: batch.ids})
	if err != nil {
		batch.fallback = true
		return
	}
	out := http.Header{}
	for _, k := range []string{api.HeaderToken, "Authorization"} {
		if v, ok := hdr[k]; ok {
			out[k] = v
		}
	}
	s.metrics.forwarded.Inc()
	status, data, via, err := s.memberRequest(ctx, id, addr, http.MethodPost, "/v1/sessions/renew", out, body)
	s.metrics.forwardedVia.WithLabelValues(via).Inc()
	if err != nil {
		if errors.Is(err, errNotSent) {
			batch.err = noLeader("the leader could not be reached; nothing was applied")
		} else {
			batch.err = fromClusterError(errUnknownForward)
		}
		s.log.Debug("renewal batch: forwarding failed", "error", err)
		return
	}
	switch status {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusServiceUnavailable:
		// The same for every renewal of the batch: the token, or the leader.
		var eb api.ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			batch.err = fromClusterError(errUnknownForward)
			return
		}
		batch.err = newError(status, eb.Error.Code, "%s", eb.Error.Message)
		if status == http.StatusServiceUnavailable {
			batch.err.retryAfter = "1"
		}
		return
	default:
		// A refusal that may concern one session only (403: another token's session), or a
		// leader that does not take the batch: each renewal goes on its own.
		batch.fallback = true
		return
	}
	var rr api.RenewSessionsResponse
	if err := json.Unmarshal(data, &rr); err != nil {
		batch.err = fromClusterError(errUnknownForward)
		return
	}
	batch.answers = make(map[string]*apiError, len(batch.ids))
	batch.ttls = make(map[string]string, len(rr.Renewed))
	answered := make(map[string]bool, len(batch.ids))
	for _, r := range rr.Renewed {
		batch.ttls[r.ID], answered[r.ID] = r.TTL, true
	}
	for _, raw := range rr.NotFound {
		batch.answers[raw], answered[raw] = sessionNotFound(raw), true
	}
	for _, raw := range rr.Unknown {
		batch.answers[raw], answered[raw] = fromClusterError(fmt.Errorf("%w: the session's expiry is being committed", cluster.ErrUnknownOutcome)), true
	}
	for _, raw := range batch.ids {
		if !answered[raw] {
			batch.answers[raw] = fromClusterError(errUnknownForward)
		}
	}
}

// isRenewal says whether the request is a session's renewal (PUT /v1/sessions/{id}/renew).
func isRenewal(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	return ok && r.Method == http.MethodPut && strings.HasSuffix(rest, "/renew") && strings.Count(rest, "/") == 1
}
