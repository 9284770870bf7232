package workload

import (
	"context"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// session is a worker's session and the goroutine that renews it.
type session struct {
	id   string
	lost atomic.Bool // a definite session_not_found was seen: it has ended

	gate   sync.Mutex // held by the worker while it is "paused": renewals stop too
	cancel context.CancelFunc
	done   chan struct{}
}

// keepalive renews every TTL/3; after a failed renewal it retries sooner on another node. It
// stops when the session is lost or cancelled. Each renewal is one recorded op.
func (w *Worker) keepalive(ctx context.Context, s *session, process int, rng *rand.Rand) {
	defer close(s.done)
	interval := w.cfg.TTL / 3
	next := interval
	for {
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		s.gate.Lock()
		s.gate.Unlock()
		if ctx.Err() != nil {
			return
		}
		// Half the renewals go through the batch endpoint, so that the checkers judge both.
		op := w.c.Renew(ctx, w.pick(rng), process, s.id, interval, rng.Intn(2) == 0)
		switch {
		case op.Type == history.OK:
			next = interval
		case op.Code == api.CodeSessionNotFound:
			s.lost.Store(true)
			return
		default:
			next = interval / 4
		}
	}
}

// newSession creates a session, retrying until one is definitely created or stop closes.
// Sessions whose creation had an unknown outcome are left to expire.
func (w *Worker) newSession(ctx context.Context, stop <-chan struct{}) *session {
	for {
		op := w.c.CreateSession(ctx, w.pick(w.rng), w.id, w.cfg.TTL, w.lockDelay(), history.PhaseMain, "")
		if op.Type == history.OK {
			kctx, cancel := context.WithCancel(ctx)
			s := &session{id: op.Session, cancel: cancel, done: make(chan struct{})}
			// The keepalive has its own random source: rand.Rand is not safe for concurrent use.
			go w.keepalive(kctx, s, renewerProcess(w.cfg, w.id), rand.New(rand.NewSource(w.rng.Int63())))
			return s
		}
		if !sleepOrStop(stop, 50*time.Millisecond+time.Duration(w.rng.Int63n(int64(100*time.Millisecond)))) {
			return nil
		}
	}
}

// lockDelay is the lock-delay of this worker's sessions: half the workers use one.
func (w *Worker) lockDelay() time.Duration {
	if w.id%2 == 1 {
		return w.cfg.LockDelay
	}
	return 0
}

// stopKeepalive ends the renewals and waits for the goroutine.
func (s *session) stopKeepalive() {
	s.cancel()
	<-s.done
}

// abandon stops renewing the session and destroys it, retrying until the outcome is definite
// or the TTL has run out several times over (then it has expired on its own anyway).
func (w *Worker) abandon(ctx context.Context, s *session) {
	s.stopKeepalive()
	if s.lost.Load() {
		return
	}
	deadline := time.Now().Add(3*w.cfg.TTL + w.cfg.OpTimeout)
	backoff := 100 * time.Millisecond
	for time.Now().Before(deadline) && ctx.Err() == nil {
		op := w.c.Destroy(ctx, w.pick(w.rng), w.id, s.id, history.PhaseMain)
		if op.Type == history.OK || op.Code == api.CodeSessionNotFound {
			return
		}
		time.Sleep(backoff) // no leader, or an unknown outcome: back off, then ask again
		backoff = min(2*backoff, time.Second)
	}
}
