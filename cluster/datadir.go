package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// ErrDataDirInUse means another process (or another node in this one) holds the data
// directory: a running agent, or `raftlock recover`.
var ErrDataDirInUse = errors.New("cluster: data dir is in use")

// lockFileName is the file in the data directory whose exclusive lock the node holds while it
// runs. The lock, not the file, is what counts: it goes with the process, however it ends.
const lockFileName = "LOCK"

// dataDirLock is the exclusive lock on a data directory.
type dataDirLock struct {
	fl *flock.Flock
}

// lockDataDir takes the exclusive lock on dir (creating dir if needed), or fails with
// ErrDataDirInUse naming the process that holds it. Two nodes on one data directory would
// each write the log and vote from it; bbolt alone would make the second wait forever.
func lockDataDir(dir string) (*dataDirLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	path := filepath.Join(dir, lockFileName)
	fl := flock.New(path)
	ok, err := fl.TryLock()
	if err != nil {
		return nil, fmt.Errorf("cluster: lock data dir: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s holds %s (a raftlock agent, or raftlock recover, runs on it): stop it first",
			ErrDataDirInUse, lockHolder(path), path)
	}
	// The pid is only for the message above; a stale one is harmless, the lock decides. It is
	// synced, as every file of the node is, so that a power cut finds nothing half written.
	writePid(path)
	return &dataDirLock{fl: fl}, nil
}

// lockHolder names the process that holds the lock file path, as it wrote itself there.
func lockHolder(path string) string {
	if b, err := os.ReadFile(path); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return fmt.Sprintf("process %d", pid)
		}
	}
	return "another process"
}

// AwaitDataDir waits until no process holds the data directory dir (an agent that is still
// stopping: one without a quorum can take seconds to exit after a SIGTERM), or ctx ends, when
// it fails with ErrDataDirInUse naming the holder. onHeld, if set, is told once who holds it
// when it has to wait. It takes nothing: the caller locks the directory itself afterwards
// (Recover), and fails as usual should another process have taken it in between.
func AwaitDataDir(ctx context.Context, dir string, onHeld func(holder string)) error {
	path := filepath.Join(dir, lockFileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	fl := flock.New(path)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for told := false; ; {
		ok, err := fl.TryLock()
		if err != nil {
			return fmt.Errorf("cluster: lock data dir: %w", err)
		}
		if ok {
			return fl.Unlock()
		}
		if !told && onHeld != nil {
			onHeld(lockHolder(path))
			told = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s still holds %s (a raftlock agent, or raftlock recover, runs on it): stop it first",
				ErrDataDirInUse, lockHolder(path), path)
		case <-t.C:
		}
	}
}

// writePid writes this process's id into the lock file and syncs it, through a descriptor of
// its own (the lock belongs to the flock's, which this does not touch).
func writePid(path string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Write([]byte(strconv.Itoa(os.Getpid()) + "\n")); err == nil {
		_ = f.Sync()
	}
}

// release lets go of the lock; nil-safe.
func (l *dataDirLock) release() {
	if l != nil {
		_ = l.fl.Unlock()
	}
}
