package cluster_test

import (
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/internal/testkit"
)

// A node that closes just after it wins an election must still close. Raft buffers the
// barrier that a new leader proposes (BatchApplyCh) and drops the buffer when it shuts down
// without answering it, so waiting on that barrier without a way out hung Close forever; it
// happened when a whole cluster got SIGTERM at once and leadership moved to a node already
// shutting down.
func TestCloseRightAfterWinningAnElection(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	for attempt := range 20 {
		if attempt > 0 {
			c.restart(0)
		}
		n := c.node(0)
		testkit.Eventually(t, 10*time.Second, "the node to win its election", func() bool {
			return n.Raft().State() == raft.Leader
		})
		closed := make(chan error, 1)
		go func() { closed <- c.detach(0).Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("attempt %d: close: %v", attempt, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("attempt %d: Close did not return within 10s of the election", attempt)
		}
	}
}

// A closed node must not stay in memory while the process runs on: a process that runs nodes
// of its own (tests, benchmarks, an embedded cluster) would keep every stopped node's whole
// state, and its garbage collector would trace it. Raft's transport does not close the
// connections it accepted, and the goroutine serving one stays blocked reading it, holding the
// transport and through it the node's raft and state, for as long as the peer keeps its end
// open. A peer keeps the connections it dialed as a leader after it steps down, and never uses
// them again while it follows: this test makes one such peer, then kills the node it dialed.
func TestAClosedNodeCanBeCollectedWhileItsPeersRun(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	first, leader := c.waitLeader()
	other, victim := (first+1)%3, (first+2)%3
	ctx := t.Context()
	// other leads for a while (dialling victim), then hands leadership back.
	if err := leader.TransferLeadership(ctx, c.ids[other]); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, leaderTimeout, "the other node to lead", func() bool {
		return c.node(other).Raft().State() == raft.Leader
	})
	if err := c.node(other).TransferLeadership(ctx, c.ids[first]); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, leaderTimeout, "the first leader to lead again", func() bool {
		return c.node(first).Raft().State() == raft.Leader
	})
	state := weak.Make(c.node(victim).FSM())
	c.kill(victim)
	testkit.Eventually(t, 10*time.Second, "the closed node's state to be collected", func() bool {
		runtime.GC()
		return state.Value() == nil
	})
}
