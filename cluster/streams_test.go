package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
)

// WaitApplied returns once the node has applied the log up to an index that ends with entries
// the state machine never sees (a barrier; the no-op a new leader appends): a stream that
// starts from the leader's applied index after an election or a barrier must not wait for a
// command that may never come. (A command that comes meanwhile would hide the wait: such a
// round proves nothing, and the test tries again.)
func TestWaitAppliedPastEntriesTheStateMachineNeverSees(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()
	testkit.Until(t, 30*time.Second, "a round without a command after the barrier", func() error {
		// A barrier that is the log's last entry: raft applies it, the state machine never
		// sees it.
		if err := leader.Raft().Barrier(5 * time.Second).Error(); err != nil {
			return err
		}
		last := leader.Raft().LastIndex()
		for _, i := range c.running() {
			n := c.node(i)
			for n.Raft().AppliedIndex() < last {
				time.Sleep(time.Millisecond) // a poll of raft's counter, not a synchronisation
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := n.WaitApplied(ctx, last)
			cancel()
			if n.FSM().AppliedIndex() >= last {
				return errors.New("a command came after the barrier") // try again
			}
			if err != nil {
				t.Fatalf("node %s: WaitApplied(%d) with raft applied %d and the state machine at %d: %v",
					n.ID(), last, n.Raft().AppliedIndex(), n.FSM().AppliedIndex(), err)
			}
		}
		return nil
	})
}
