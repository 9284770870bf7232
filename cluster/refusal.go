package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// ErrNeedsNewerVersion means this node's data or log holds what only a newer raftlock can
// apply (a snapshot or a log entry of a feature this version lacks): a downgrade after the
// cluster enabled a feature. The node stops rather than skip it and drift from the others; a
// restart of the same version meets it again. It wraps fsm.ErrNewerFormat.
var ErrNeedsNewerVersion = errors.New("cluster: this node's data needs a newer raftlock: run the version the cluster runs")

// needsNewer wraps err, which wraps fsm.ErrNewerFormat, as ErrNeedsNewerVersion.
func needsNewer(err error) error {
	return fmt.Errorf("%w: %w", ErrNeedsNewerVersion, err)
}

// haltingFSM is the state machine as raft sees it: it stops the node, once, the first time
// the state machine halts at an entry it cannot apply (fsm.FSM.Halted), with the same
// refusal as a snapshot of a newer format gives at start (ErrNeedsNewerVersion).
type haltingFSM struct {
	raft.BatchingFSM
	state  *fsm.FSM
	onHalt func(error)
}

// Apply applies l, and stops the node if the state machine halted at it.
func (h haltingFSM) Apply(l *raft.Log) interface{} {
	return h.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies logs, and stops the node if the state machine halted at one of them.
func (h haltingFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := h.BatchingFSM.ApplyBatch(logs)
	if err := h.state.Halted(); err != nil {
		h.onHalt(needsNewer(err))
	}
	return out
}

// refuse stops the node for a reason a restart of the same version cannot cure (see
// ErrNeedsNewerVersion): through Config.OnRefusal if set (the agent exits with its refusal
// status), else by closing the node. Only the first call counts.
func (n *Node) refuse(err error) {
	n.refuseOnce.Do(func() {
		n.log.Error("stopping this node: its log holds an entry that only a newer raftlock can apply (the cluster "+
			"enabled a feature this version lacks); start it with the version the other members run — "+
			"restarting this version meets the same entry again", "error", err)
		if n.cfg.OnRefusal != nil {
			n.cfg.OnRefusal(err)
			return
		}
		go n.Close()
	})
}

// snapshotOnFeatures asks for a snapshot (snapshotLoop) when the applied entries enabled a
// feature: from then on a node of an older version that starts on this data directory meets
// the snapshot, which names the feature, before any entry that uses it, and refuses at once
// (ErrNeedsNewerVersion) instead of applying part of the log first.
func (n *Node) snapshotOnFeatures(events []fsm.Event) {
	for _, e := range events {
		if e.Kind == fsm.EventFeaturesChanged {
			select {
			case n.featureSnap <- struct{}{}:
			default:
			}
			return
		}
	}
}

// snapshotLoop takes the snapshots snapshotOnFeatures asks for, until ctx ends. Not taken in
// Observe itself: that runs on raft's apply goroutine, which a snapshot needs. A snapshot
// asked for while a restore is installed waits for it (userSnapshot), then covers it.
func (n *Node) snapshotLoop(ctx context.Context) {
	defer n.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.featureSnap:
		}
		switch done, err := n.userSnapshot(ctx.Done()); {
		case !done:
			return
		case err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot):
			n.log.Warn("snapshot after enabling features failed; an older version that starts here stops at the entry instead", "error", err)
		default:
			n.log.Debug("snapshot taken after enabling features")
		}
	}
}
