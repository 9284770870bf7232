package cluster

import (
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// startupRestore restores the newest snapshot into the state machine beside raft's start
// instead of before it: raft scans its log, answers votes and may win an election while the
// state machine decodes, which with a large state is most of a restart. raft must then be told
// not to restore (NoSnapshotRestoreOnStart): it takes the newest snapshot's index and
// configuration from its metadata, and reaches the state machine only through gatedFSM.
type startupRestore struct {
	done chan struct{}
	err  error // written once, before done is closed
}

// beginStartupRestore opens the newest snapshot in snaps and starts restoring it into f. It
// returns nil when there is no snapshot, or when the newest does not open (its checksum is
// checked here), so that raft restores as usual and falls back to an older one.
func beginStartupRestore(f *fsm.FSM, snaps raft.SnapshotStore, log hclog.Logger) *startupRestore {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return nil
	}
	meta, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		log.Warn("newest snapshot does not open; raft restores the state", "id", list[0].ID, "error", err)
		return nil
	}
	r := &startupRestore{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		start := time.Now()
		if err := f.Restore(rc); err != nil {
			r.err = fmt.Errorf("cluster: restore snapshot %s: %w", meta.ID, err)
			return
		}
		log.Info("restored from snapshot", "id", meta.ID, "index", meta.Index,
			"bytes", meta.Size, "took", time.Since(start))
	}()
	return r
}

// wait blocks until the restore has ended and returns its error.
func (r *startupRestore) wait() error {
	<-r.done
	return r.err
}

// gatedFSM is the state machine as raft sees it while a startup restore runs: every call
// waits for the restore, and fails without touching the state if the restore failed.
type gatedFSM struct {
	*fsm.FSM
	restore *startupRestore
}

var _ raft.BatchingFSM = gatedFSM{}

// Apply applies l once the restore is in.
func (g gatedFSM) Apply(l *raft.Log) interface{} {
	return g.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies logs once the restore is in.
func (g gatedFSM) ApplyBatch(logs []*raft.Log) []interface{} {
	if err := g.restore.wait(); err != nil {
		out := make([]interface{}, len(logs))
		for i, l := range logs {
			out[i] = fsm.Result{Index: l.Index, Err: err}
		}
		return out
	}
	return g.FSM.ApplyBatch(logs)
}

// Snapshot captures the state once the restore is in.
func (g gatedFSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := g.restore.wait(); err != nil {
		return nil, err
	}
	return g.FSM.Snapshot()
}

// Restore replaces the state with rc once the startup restore is over.
func (g gatedFSM) Restore(rc io.ReadCloser) error {
	if err := g.restore.wait(); err != nil {
		rc.Close()
		return err
	}
	return g.FSM.Restore(rc)
}
