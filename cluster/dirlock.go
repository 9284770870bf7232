package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrDataDirInUse means another node, in this process or another, has the data directory open.
var ErrDataDirInUse = errors.New("cluster: the data directory is in use by another node")

// lockFileName is the file in the data directory that a running node holds locked.
const lockFileName = "LOCK"

// dirLock is an exclusive lock on a data directory, held from New to the end of Close. Two
// nodes on one directory would each append to the same Raft log and overwrite each other's
// snapshots and term, which no later start could untangle; a lock taken with flock dies with
// its process, so a crashed node never leaves a stale one behind.
type dirLock struct{ f *os.File }

// lockDataDir takes the lock on dir or says who holds it. The lock file records the holder's
// process id, for the error message only: the lock itself is the flock.
func lockDataDir(dir string) (*dirLock, error) {
	name := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("cluster: data dir lock: %w", err)
	}
	if err := tryLock(f); err != nil {
		holder, _ := os.ReadFile(name)
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%w: %s is locked by process %s; stop that node first (two nodes on one data dir would corrupt its log)",
				ErrDataDirInUse, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("cluster: data dir lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// unlock releases the lock; closing the file does it.
func (l *dirLock) unlock() {
	if l != nil {
		l.f.Close()
	}
}

// errLocked is tryLock's answer when another open file holds the lock.
var errLocked = errors.New("locked")
