package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// A new directory entry (a file, a directory) survives a power cut only once the directory
// holding it has been fsynced: fsyncing the file itself is not enough. The stores fsync what
// they write inside their own directories, but nobody fsynced the data directory that holds
// them, nor the directory of each snapshot: after a power cut the whole log could vanish and a
// node bootstrap a new cluster, or a snapshot come back empty after the log behind it was
// compacted. Found by the jepsen power-loss nemesis (package jepsen/faultfs).

// syncDir fsyncs the directory at path, making the entries created in it durable.
func syncDir(path string) error {
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: sync directory %s: %w", path, err)
	}
	return nil
}

// mkdirAllDurable creates path and its missing parents, and fsyncs the parent of each
// directory it created, so that they survive a power cut.
func mkdirAllDurable(path string, perm os.FileMode) error {
	path = filepath.Clean(path)
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(path)
	if parent != path {
		if err := mkdirAllDurable(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, perm); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

// durableSnapshots is the snapshot store whose snapshots survive a power cut once Close
// returns: hashicorp/raft's FileSnapshotStore fsyncs a snapshot's files and, after renaming
// its directory into place, the parent, but never the snapshot's own directory, so the entries
// of state.bin and meta.json inside it are not durable when raft goes on to compact the log.
type durableSnapshots struct {
	raft.SnapshotStore
	dir string // the directory holding one directory per snapshot
}

// Create starts a snapshot whose sink makes its directory durable on Close.
func (s durableSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &durableSink{SnapshotSink: sink, dir: s.dir}, nil
}

// snapshotSyncEvery is how much of a snapshot is written between two fsyncs of its file. The
// store fsyncs the file once, when it is whole; the page cache would then hold all of it (95
// MiB at a million sessions and locks) until that fsync, which holds the log's own fsyncs
// behind it while the disk takes it in: on this project's machine a 95 MiB write and one fsync
// held a concurrent small fsync 60 ms, and written in steps of 4 MiB with an fsync after each,
// 7–14 ms. Every commit waits for such an fsync on the leader and on a follower.
const snapshotSyncEvery = 4 << 20

// durableSink fsyncs the snapshot's file as it is written (snapshotSyncEvery), and its
// directory once the store has moved it into place.
type durableSink struct {
	raft.SnapshotSink
	dir string

	unsynced int      // bytes written since the last fsync
	state    *os.File // the store's state.bin of this snapshot, opened for the fsyncs
	syncs    int      // fsyncs made as it was written
}

// Write writes p to the snapshot, and fsyncs what the store has written of it every
// snapshotSyncEvery bytes.
func (s *durableSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	if s.unsynced += n; err == nil && s.unsynced >= snapshotSyncEvery {
		s.unsynced = 0
		if s.state == nil {
			// hashicorp/raft's FileSnapshotStore (v1.7.2) writes <dir>/<id>.tmp/state.bin
			// until Close renames the directory; fsync is per file, so another descriptor
			// of it will do. Should the layout differ, only the steps are lost.
			s.state, _ = os.OpenFile(filepath.Join(s.dir, s.ID()+".tmp", "state.bin"), os.O_WRONLY, 0)
		}
		if s.state != nil && s.state.Sync() == nil {
			s.syncs++
		}
	}
	return n, err
}

// Close finishes the snapshot and makes its files' entries durable before raft compacts the
// log behind it.
func (s *durableSink) Close() error {
	s.closeState()
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Join(s.dir, s.ID()))
}

// Cancel abandons the snapshot.
func (s *durableSink) Cancel() error {
	s.closeState()
	return s.SnapshotSink.Cancel()
}

func (s *durableSink) closeState() {
	if s.state != nil {
		_ = s.state.Close()
		s.state = nil
	}
}
