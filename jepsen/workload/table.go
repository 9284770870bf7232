package workload

import (
	"context"
	"time"
)

// sampleEvery is how often the sampler reads the lock table while the workload runs.
const sampleEvery = 250 * time.Millisecond

// sample reads the whole lock table (Client.ReadTable) every sampleEvery, from each node in
// turn, until stop closes. Every lock's holder is then known at instants a quarter of a second
// apart, through every fault: the held-by-nobody checker needs to see how long a lock stayed
// with one session, and the other checkers judge these reads like any other.
func (wl *Workload) sample(ctx context.Context, stop <-chan struct{}) {
	eps := wl.c.Endpoints()
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wl.c.ReadTable(ctx, eps[k%len(eps)], samplerProcess(wl.cfg), wl.cfg.Locks)
	}
}
