package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/client"
)

// cycleHold is the longest a cycler works under a lock: cycles are meant to be fast.
const cycleHold = 5 * time.Millisecond

// cycle is a cycler's loop. A user who guards many short jobs with a lock keeps one session and
// one Mutex per lock and calls Lock and Unlock over and over; so does a cycler, as fast as the
// cluster lets it, in bursts on one lock at a time: a burst lasts 0.5 to 1.5 TTL and ends with
// an acknowledged Unlock, then the cycler moves on to the next lock, so that it stays away from
// each lock for a while. Each cycle's attempt is fenced on the server by its Unlock (or, when
// Lock gave up, by its withdrawal), so a session collects hundreds of fences in a run. A late
// request of an early attempt that the server has forgotten it fenced can then take a lock that
// no Mutex of the session holds or asks for, until the cycler comes back to it: the
// held-by-nobody checker sees such a lock. Cyclers take neither client pauses nor crash cuts,
// which would end their sessions.
func (w *ClientWorker) cycle(ctx context.Context, stop <-chan struct{}) {
	var mutexes map[string]*client.Mutex
	next := w.rng.Intn(len(w.cfg.Locks))
	w.withSessions(ctx, stop, func(s *client.Session, fresh bool) {
		if fresh {
			mutexes = map[string]*client.Mutex{}
		}
		lock := w.cfg.Locks[next%len(w.cfg.Locks)]
		next++
		m := mutexes[lock]
		if m == nil {
			m = client.NewMutex(s, lock, client.WithWaitChunk(w.chunk()))
			mutexes[lock] = m
		}
		w.burst(ctx, stop, s, lock, m)
	})
}

// burst cycles on one lock for 0.5 to 1.5 TTL, and then until a cycle's Unlock is acknowledged
// (for at most 4 TTL more), so that nothing of the session's attempts on the lock is left in
// the client's background when the cycler moves on.
func (w *ClientWorker) burst(ctx context.Context, stop <-chan struct{}, s *client.Session, lock string, m *client.Mutex) {
	start := time.Now()
	length := w.cfg.TTL/2 + w.jitter(w.cfg.TTL)
	for !stopped(stop) && ctx.Err() == nil && s.Err() == nil {
		settled := w.cycleOnce(ctx, stop, s, lock, m)
		since := time.Since(start)
		if settled && since >= length || since >= length+4*w.cfg.TTL {
			return
		}
		if !settled {
			sleepOrStop(stop, w.jitter(20*time.Millisecond))
		}
	}
}

// cycleOnce locks m (waiting up to a TTL), maybe writes under the token, and unlocks it. It
// reports whether the Unlock was acknowledged.
func (w *ClientWorker) cycleOnce(ctx context.Context, stop <-chan struct{}, s *client.Session, lock string, m *client.Mutex) bool {
	h := &holder{api: APILock, m: m, release: m.Unlock}
	ok, token := w.acquireFor(ctx, s, lock, h, "cycle", 50*time.Millisecond+w.jitter(w.cfg.TTL))
	if !ok {
		return false
	}
	start := w.rec.Now()
	b, unwatch := w.watchBelief(m.Context())
	defer unwatch()
	checkedAt := w.rec.Now()
	if w.rng.Intn(4) == 0 && (w.cfg.IgnoreDone || m.Context().Err() == nil) {
		w.res.WriteAt(w.id, lock, s.ID(), token, fmt.Sprintf("client-worker-%d", w.id), w.unchecked, checkedAt)
	}
	sleepOrStop(stop, w.jitter(cycleHold))
	return w.letGo(ctx, s, lock, h, token, start, b, true)
}
