package cluster

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// ErrStorageFailed refuses every write to the Raft log and stable store after one failed.
var ErrStorageFailed = errors.New("cluster: an earlier write to the Raft log or stable store failed; this node stopped writing")

// failStopStore stops writing at the first failed write to the log or stable store, and
// reports it once. A failed fsync may have dropped the data it was to make durable (Linux
// marks the pages clean), so a retry that succeeds would acknowledge writes the disk never
// got: hashicorp/raft retries — a leader steps down and tries again, a follower refuses the
// append and gets it again, and a failed term write panics. Stopping is the one safe answer;
// whatever was durable before is still correct, so the node can restart once the disk works.
type failStopStore struct {
	logStore
	failed atomic.Bool
	onFail func(error)
	// metrics gets the latency of each append and a count of the failed writes.
	metrics *nodeMetrics
}

// check passes a write's error through, and reports the first failure.
func (s *failStopStore) check(err error) error {
	if err != nil {
		s.metrics.storageFailures.Add(1)
	}
	if err != nil && s.failed.CompareAndSwap(false, true) {
		s.onFail(err)
	}
	return err
}

// write runs a write unless an earlier one failed.
func (s *failStopStore) write(f func() error) error {
	if s.failed.Load() {
		return ErrStorageFailed
	}
	return s.check(f())
}

// timed runs an append and records its latency if it succeeded.
func (s *failStopStore) timed(f func() error) error {
	start := time.Now()
	err := f()
	if err == nil {
		s.metrics.appendLatency.Observe(time.Since(start).Seconds())
	}
	return err
}

// StoreLog stores a log entry.
func (s *failStopStore) StoreLog(l *raft.Log) error {
	return s.write(func() error { return s.timed(func() error { return s.logStore.StoreLog(l) }) })
}

// StoreLogs stores log entries.
func (s *failStopStore) StoreLogs(logs []*raft.Log) error {
	return s.write(func() error { return s.timed(func() error { return s.logStore.StoreLogs(logs) }) })
}

// DeleteRange deletes a range of log entries.
func (s *failStopStore) DeleteRange(lo, hi uint64) error {
	return s.write(func() error { return s.logStore.DeleteRange(lo, hi) })
}

// Set stores a key of the stable store.
func (s *failStopStore) Set(k, v []byte) error {
	return s.write(func() error { return s.logStore.Set(k, v) })
}

// SetUint64 stores a number of the stable store.
func (s *failStopStore) SetUint64(k []byte, v uint64) error {
	return s.write(func() error { return s.logStore.SetUint64(k, v) })
}

var _ raft.MonotonicLogStore = (*failStopStore)(nil)

// IsMonotonic reports what the wrapped store reports. raft must see it through the wrapper:
// after installing a snapshot it clears the whole log of a monotonic store (raft-wal), which
// refuses an append that leaves a gap; hidden, a lagging follower's next append failed.
func (s *failStopStore) IsMonotonic() bool {
	m, ok := s.logStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// storageFailed is the node's answer to a failed write: it says why, then stops at once —
// through Config.OnStorageFailure if set (the agent exits), else by closing the node.
func (n *Node) storageFailed(err error) {
	n.log.Error("a write to the Raft log or stable store failed: stopping this node at once, since the disk may "+
		"have lost what it was writing; check the disk (free space, errors in the kernel log) before starting "+
		"the node again — what it wrote before is intact", "data_dir", n.cfg.DataDir, "error", err)
	if n.cfg.OnStorageFailure != nil {
		n.cfg.OnStorageFailure(err)
		return
	}
	go n.Close()
}

// noSyncVFS is raft-wal's file system with every fsync of the segment files skipped: the
// hidden, test-only --unsafe-no-log-fsync that proves the power-loss nemesis catches a log
// that acknowledges entries before they are durable.
type noSyncVFS struct{ *walfs.FS }

// Create creates a segment file whose Sync does nothing.
func (v noSyncVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

// OpenWriter opens a segment file whose Sync does nothing.
func (v noSyncVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.FS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

// noSyncFile is a segment file that never syncs.
type noSyncFile struct{ types.WritableFile }

// Sync skips the fsync.
func (noSyncFile) Sync() error { return nil }

// timedVFS is raft-wal's file system with every fsync of the segment files timed.
type timedVFS struct {
	types.VFS
	observe func(seconds float64)
}

// Create creates a segment file whose Sync is timed.
func (v timedVFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := v.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return timedFile{f, v.observe}, nil
}

// OpenWriter opens a segment file whose Sync is timed.
func (v timedVFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := v.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	return timedFile{f, v.observe}, nil
}

// timedFile is a segment file whose successful fsyncs are timed.
type timedFile struct {
	types.WritableFile
	observe func(seconds float64)
}

// Sync syncs the file and records how long it took.
func (f timedFile) Sync() error {
	start := time.Now()
	err := f.WritableFile.Sync()
	if err == nil {
		f.observe(time.Since(start).Seconds())
	}
	return err
}
