package cluster

import (
	"sync/atomic"

	"github.com/raftlock/raftlock/fsm"
)

// counters count what this node's state machine applied, for metrics.
type counters struct {
	grants, releases, expiries atomic.Uint64
	raftTLSRefused             atomic.Uint64
}

func (c *counters) observe(events []fsm.Event) {
	for i := range events {
		switch e := &events[i]; e.Kind {
		case fsm.EventGranted:
			c.grants.Add(1)
		case fsm.EventReleased:
			c.releases.Add(1)
		case fsm.EventSessionEnded:
			if e.Expired {
				c.expiries.Add(1)
			}
		}
	}
}

// Counters are totals of what this node applied, and of the Raft connections it refused, since
// it started.
type Counters struct {
	Grants, Releases, Expiries uint64
	// RaftTLSRefused counts incoming Raft connections whose TLS handshake failed.
	RaftTLSRefused uint64
}

// Counters returns the grants, releases and session expiries applied since the node started,
// and the Raft connections it refused.
func (n *Node) Counters() Counters {
	return Counters{Grants: n.stats.grants.Load(), Releases: n.stats.releases.Load(), Expiries: n.stats.expiries.Load(),
		RaftTLSRefused: n.stats.raftTLSRefused.Load()}
}

// SessionTimers returns how many session timers this node runs (non-zero only on the leader).
func (n *Node) SessionTimers() int { return n.timers.count() }
