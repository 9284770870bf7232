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
	return durableSink{SnapshotSink: sink, dir: s.dir}, nil
}

// durableSink fsyncs the snapshot's directory once the store has moved it into place.
type durableSink struct {
	raft.SnapshotSink
	dir string
}

// Close finishes the snapshot and makes its files' entries durable before raft compacts the
// log behind it.
func (s durableSink) Close() error {
	if err := s.SnapshotSink.Close(); err != nil {
		return err
	}
	return syncDir(filepath.Join(s.dir, s.ID()))
}
