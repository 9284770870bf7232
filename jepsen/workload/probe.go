package workload

import (
	"context"
	"sync"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// Probe is the final phase: once every fault has healed, a fresh session per lock tries to take
// it, for at most bound, however many requests that needs. All its ops are recorded in the final
// phase for the liveness checker. The probes keep their locks (their TTL outlives the bound), so
// that the nodes' final tables, compared by the convergence checker, are not empty.
func (wl *Workload) Probe(ctx context.Context, bound time.Duration) {
	var wg sync.WaitGroup
	for i, lock := range wl.cfg.Locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wl.probe(ctx, probeProcess(wl.cfg, i), lock, bound)
		}()
	}
	wg.Wait()
}

func (wl *Workload) probe(ctx context.Context, process int, lock string, bound time.Duration) {
	deadline := time.Now().Add(bound)
	eps := wl.c.Endpoints()
	next := func(k int) Endpoint { return eps[(process+k)%len(eps)] }
	// The probe does not renew, so its TTL outlives the bound and the convergence check after it.
	ttl := bound + 30*time.Second
	var session string
	for k := 0; session == "" && time.Now().Before(deadline) && ctx.Err() == nil; k++ {
		op := wl.c.CreateSession(ctx, next(k), process, ttl, 0, history.PhaseFinal, lock)
		if op.Type == history.OK {
			session = op.Session
		} else {
			time.Sleep(100 * time.Millisecond) // back off before the next node
		}
	}
	if session == "" {
		return
	}
	for k := 0; ctx.Err() == nil; k++ {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		op := wl.c.Acquire(ctx, next(k), process, lock, session, "", min(left, 5*time.Second), history.PhaseFinal)
		if op.Type == history.OK {
			return
		}
		if op.Type == history.Fail && op.Status != 409 {
			time.Sleep(100 * time.Millisecond) // no leader, or refused: back off
		}
	}
}
