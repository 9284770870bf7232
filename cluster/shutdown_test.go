package cluster_test

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
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
		waitFor(t, 10*time.Second, "the node to win its election", func() bool {
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
