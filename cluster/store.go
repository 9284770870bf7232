package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"

	"github.com/raftlock/raftlock/fsm"
)

// The Raft log and stable stores a node can keep. Both fsync every append before raft counts
// it, so an acknowledged command is on the disks of a majority either way.
const (
	// LogStoreBoltDB is raft-boltdb/v2 on bbolt, in DataDir/raft.db: a B+tree that syncs twice
	// per commit (pages, then the meta page).
	LogStoreBoltDB = "boltdb"
	// LogStoreWAL is hashicorp/raft-wal in DataDir/wal: append-only segment files that sync
	// once per append, with its metadata in a small bbolt file.
	LogStoreWAL = "wal"
)

// logStore is a node's Raft log and stable store.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// storePaths returns where each kind of store lives in dataDir.
func storePaths(dataDir string) map[string]string {
	return map[string]string{
		LogStoreBoltDB: filepath.Join(dataDir, "raft.db"),
		LogStoreWAL:    filepath.Join(dataDir, "wal"),
	}
}

// DefaultLogStore is the log store of a new data directory when none is named.
const DefaultLogStore = LogStoreWAL

// detectLogStore returns the kind of log store dataDir holds, or "" if it holds none yet.
func detectLogStore(dataDir string) (string, error) {
	var found []string
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		_, err := os.Stat(storePaths(dataDir)[kind])
		switch {
		case err == nil:
			found = append(found, kind)
		case !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("cluster: inspect data dir: %w", err)
		}
	}
	if len(found) > 1 {
		return "", fmt.Errorf("cluster: data dir %s holds both a %q and a %q log store; remove the one this node did not use", dataDir, found[0], found[1])
	}
	if len(found) == 0 {
		return "", nil
	}
	return found[0], nil
}

// resolveLogStore returns the store a node opens in dataDir: the one the directory holds, or
// for a new directory the one named (DefaultLogStore if none). Naming a store that differs from
// the one the directory holds is refused: opening an empty store there would look like a new
// node, which could bootstrap a second cluster or vote with a forgotten log.
func resolveLogStore(named, dataDir string) (string, error) {
	have, err := detectLogStore(dataDir)
	switch {
	case err != nil:
		return "", err
	case have == "" && named == "":
		return DefaultLogStore, nil
	case have == "":
		return named, nil
	case named != "" && named != have:
		return "", fmt.Errorf("cluster: data dir %s holds a %q log store (%s), not %q; use --log-store %s (or leave it out)",
			dataDir, have, storePaths(dataDir)[have], named, have)
	}
	return have, nil
}

// openLogStore opens the store kind names in dataDir, which resolveLogStore chose. noSync
// skips the fsync of the log (Config.UnsafeNoLogFsync, for tests of the harness only);
// onSync, if set, gets the seconds each fsync of raft-wal's segment files took.
func openLogStore(kind, dataDir string, walSegmentSize int, noSync bool, onSync func(float64), logger hclog.Logger) (logStore, error) {
	paths := storePaths(dataDir)
	switch kind {
	case LogStoreWAL:
		if err := os.MkdirAll(paths[kind], 0o750); err != nil {
			return nil, fmt.Errorf("cluster: wal dir: %w", err)
		}
		// A segment size of 0 is raft-wal's default.
		var vfs types.VFS = walfs.New()
		if noSync {
			vfs = noSyncVFS{walfs.New()}
		}
		if onSync != nil {
			vfs = timedVFS{VFS: vfs, observe: onSync}
		}
		filer := wal.WithSegmentFiler(segment.NewFiler(paths[kind], vfs))
		w, err := wal.Open(paths[kind], wal.WithLogger(logger.Named("wal")), wal.WithSegmentSize(walSegmentSize), filer)
		if err != nil {
			return nil, fmt.Errorf("cluster: open wal log store: %w", err)
		}
		return w, nil
	default:
		b, err := raftboltdb.New(raftboltdb.Options{Path: paths[kind], NoSync: noSync})
		if err != nil {
			return nil, fmt.Errorf("cluster: open log store: %w", err)
		}
		return b, nil
	}
}

// sizedSnapshots is the snapshot store whose readers tell their size (fsm.Sizer), so that the
// state machine reads a snapshot into one buffer instead of growing one while it restores,
// and their log position (fsm.Positioned), so that its applied index stays true.
type sizedSnapshots struct {
	raft.SnapshotStore
}

// Open opens the snapshot id, with a reader that tells the size its metadata records.
func (s sizedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, err := s.SnapshotStore.Open(id)
	if err != nil {
		return nil, nil, err
	}
	return meta, sizedReader{ReadCloser: rc, size: meta.Size, index: meta.Index, term: meta.Term}, nil
}

// sizedReader is a snapshot reader that tells the size and log position its metadata records.
type sizedReader struct {
	io.ReadCloser
	size        int64
	index, term uint64
}

var (
	_ fsm.Sizer      = sizedReader{}
	_ fsm.Positioned = sizedReader{}
)

func (r sizedReader) Size() int64 { return r.size }

func (r sizedReader) SnapshotPosition() (index, term uint64) { return r.index, r.term }
