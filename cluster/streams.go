package cluster

import (
	"context"
	"time"

	"github.com/hashicorp/raft"
)

// LeaderContact returns when this node last heard from a leader of its cluster: now while it
// leads (a leader that loses its majority steps down within LeaderLeaseTimeout, and then no
// longer counts), the time of the leader's last message (heartbeat or entries) while it follows,
// and the zero time when it never heard one. A streamed watch on a node that heard nothing for
// longer than an election timeout may be missing committed changes, and says so.
func (n *Node) LeaderContact() time.Time {
	if n.raft.State() == raft.Leader {
		return time.Now()
	}
	if id, _ := n.raft.LeaderWithID(); id == "" {
		// No leader known: a candidate, or a follower whose leader's lease ran out.
		return time.Time{}
	}
	return n.raft.LastContact()
}

// ElectionTimeout is the configured Raft election timeout: how long a follower waits without a
// word from the leader before it stands for election itself.
func (n *Node) ElectionTimeout() time.Duration { return n.cfg.ElectionTimeout }

// WaitApplied returns once this node's state machine has applied the log up to index, or with
// ctx's error. It looks every millisecond or two: a follower is that close behind its leader
// when it is current, and the only callers are streams starting, which wait once.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	if n.appliedThrough(index) {
		return nil
	}
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for !n.appliedThrough(index) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return ErrShutdown
		case <-t.C:
		}
	}
	return nil
}

// appliedThrough says whether the state machine has applied the log up to index. Raft hands
// the state machine commands and configurations only: a barrier, or the no-op a new leader
// appends, moves raft's applied index but not the state machine's, and when the log ends with
// one (the leader's applied index, answered to a follower's stream, often does) no command may
// come to move the state machine's. So once raft has applied up to index, the entries after the
// state machine's own index that it never sees do not count.
func (n *Node) appliedThrough(index uint64) bool {
	at := n.fsm.AppliedIndex()
	if at >= index {
		return true
	}
	if n.raft.AppliedIndex() < index || index-at > maxUnseenEntries {
		return false
	}
	var l raft.Log
	for i := at + 1; i <= index; i++ {
		if err := n.store.GetLog(i, &l); err != nil {
			return false // compacted, or failing: wait for the state machine instead
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return false // the state machine has yet to apply it
		}
	}
	return true
}

// maxUnseenEntries bounds the entries appliedThrough reads: more than a few entries the state
// machine never sees in a row do not happen (a no-op per election, a barrier per leadership).
const maxUnseenEntries = 64
