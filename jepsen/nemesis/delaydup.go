package nemesis

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
	"github.com/raftlock/raftlock/jepsen/proxy"
	"github.com/raftlock/raftlock/jepsen/workload"
)

// The shape of a delay-dup fault: the share of the Go-client workers' acquire requests held
// back, and duplicated, while it is in force.
const (
	delayShare     = 0.1
	duplicateShare = 0.2
)

// delayDup delays and duplicates the Go-client workers' acquire requests on their way to the
// nodes, through the workers' own proxies, for 3 to 6 TTLs: a request is held back, or
// delivered at once with its answer lost and again later on a new connection, 0.5 to 2 TTLs
// late, long enough to outlive the call that sent it. The fault ends when the last late request
// it made is due, and its stop says how many requests it delayed and duplicated. Its decisions
// come from a sequence seeded by the nemesis.
func (n *Nemesis) delayDup(ctx context.Context) {
	lo, hi := n.cfg.TTL/2, 2*n.cfg.TTL
	f := proxy.NewRequestFault(proxy.FaultConfig{Match: workload.IsAcquire, Delay: delayShare, Duplicate: duplicateShare,
		Min: lo, Max: hi, Seed: n.rng.Int63()})
	d := n.between(3*n.cfg.TTL, 6*n.cfg.TTL)
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	if !n.wl.SetRequestFault(f) {
		n.wl.SetRequestFault(nil)
		n.logf("%s: no Go-client workers to delay", DelayDup)
		return
	}
	n.record(DelayDup, history.ActionStart, id, inv, fmt.Sprintf("Go-client acquires: %.0f%% held back, %.0f%% duplicated (answer lost), %s to %s late, for %s",
		100*delayShare, 100*duplicateShare, lo.Round(time.Millisecond), hi.Round(time.Millisecond), d.Round(time.Millisecond)), nil)
	hold(ctx, d)
	n.wl.SetRequestFault(nil)
	// The fault lasts until the last late request it made is due.
	hold(ctx, hi+100*time.Millisecond)
	n.record(DelayDup, history.ActionStop, id, n.rec.Now(), f.Counts().String(), nil)
}
