package workload

import (
	"context"
	"sync"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/jepsen/history"
)

// belief is the interval in which the worker believes it holds a lock.
type belief struct {
	mu    sync.Mutex
	end   int64
	why   string
	ended chan struct{}
}

// finish ends the belief at t, unless it ended already.
func (b *belief) finish(t int64, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.end == 0 {
		b.end, b.why = t, why
		close(b.ended)
	}
}

// watchBelief starts a belief that ends when the hold's context is done (never, with
// Config.IgnoreDone); the returned func stops watching.
func (w *ClientWorker) watchBelief(holdCtx context.Context) (*belief, func() bool) {
	b := &belief{ended: make(chan struct{})}
	if w.cfg.IgnoreDone {
		return b, func() bool { return true }
	}
	return b, context.AfterFunc(holdCtx, func() {
		b.finish(w.rec.Now(), "context done: "+context.Cause(holdCtx).Error())
	})
}

// letGo ends a hold that began at start: the belief ends as Unlock or Resign begins, then,
// if release is set, the worker calls it, and records the call (history.ClientRelease) and the
// belief. It reports whether the release settled the lock: Unlock returned nil, so nothing of
// the Mutex's attempts is left for the client to release or withdraw in the background.
func (w *ClientWorker) letGo(ctx context.Context, s *client.Session, lock string, h *holder, token uint64, start int64,
	b *belief, release bool) (settled bool) {
	why := "unlock"
	if h.e != nil {
		why = "resign"
	}
	b.finish(w.rec.Now(), why+" began")
	detail := ""
	if token == 0 {
		detail = "; token unknown: the hold was forgotten, its session lost, as the call returned"
	}
	if !release {
		detail += "; lost, not unlocked"
	} else {
		op := history.Op{Process: w.id, Kind: history.ClientRelease, Type: history.OK, Lock: lock, Session: s.ID(),
			API: h.api, Token: token, Invoke: w.rec.Now()}
		rctx, cancel := context.WithTimeout(ctx, 2*w.cfg.OpTimeout)
		err := h.release(rctx)
		cancel()
		op.Complete = w.rec.Now()
		if err != nil {
			op.Type, op.Error = history.Info, err.Error()
			detail += "; " + why + ": " + err.Error()
		}
		if h.e != nil {
			// Resign answers nil also when Unlock found the hold lost and withdraws in the
			// background: whether the lock is settled is unknown.
			op.Type, op.Detail = history.Info, "Resign does not say whether the lock is settled"
		}
		w.rec.Add(op)
		settled = op.Type == history.OK
	}
	b.mu.Lock()
	op := history.Op{Process: w.id, Kind: history.Believe, Type: history.OK, Lock: lock, Session: s.ID(), API: h.api,
		OutToken: token, Invoke: start, Complete: b.end, Detail: b.why + detail}
	b.mu.Unlock()
	w.rec.Add(op)
	return settled
}
