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
//
// The state machine's own count is the proof, except after a snapshot sent by the leader: its
// install does not tell the state machine the snapshot's index, and its count stays below until
// the next entry. So raft's applied index (which passes an entry when it is handed to the state
// machine, a moment before it is applied) is believed too, once it has stayed at or past index
// for snapshotGrace: by then the state machine has applied what raft handed it.
func (n *Node) WaitApplied(ctx context.Context, index uint64) error {
	if n.fsm.AppliedIndex() >= index {
		return nil
	}
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	var raftPast time.Time
	for {
		if n.fsm.AppliedIndex() >= index {
			return nil
		}
		switch {
		case n.raft.AppliedIndex() < index:
			raftPast = time.Time{}
		case raftPast.IsZero():
			raftPast = time.Now()
		case time.Since(raftPast) >= snapshotGrace:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.stop:
			return ErrShutdown
		case <-t.C:
		}
	}
}

// snapshotGrace is how long raft's applied index must have stood at an index before
// WaitApplied believes the state machine applied it without its own count saying so.
const snapshotGrace = 50 * time.Millisecond
