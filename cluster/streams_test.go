package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
)

// A read index taken when the log ends with entries the state machine never sees (a barrier;
// the no-op a new leader appends) is one every node's state machine reaches: a read or a
// stream that starts after an election or a barrier must not wait for a command that may
// never come. (A command that comes meanwhile would hide the wait: such a round proves
// nothing, and the test tries again.)
func TestReadIndexPastEntriesTheStateMachineNeverSees(t *testing.T) {
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
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		index, err := leader.ReadIndex(ctx)
		if err != nil {
			return err
		}
		for _, i := range c.running() {
			n := c.node(i)
			wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := n.WaitApplied(wctx, index)
			wcancel()
			if n.FSM().AppliedIndex() >= last {
				return errors.New("a command came after the barrier") // try again
			}
			if err != nil {
				t.Fatalf("node %s: WaitApplied(%d) (the log ends at %d, raft applied %d, the state machine %d): %v",
					n.ID(), index, last, n.Raft().AppliedIndex(), n.FSM().AppliedIndex(), err)
			}
		}
		return nil
	})
}
