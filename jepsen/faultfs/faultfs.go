package faultfs

import (
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Stats count what the FS did since it was made.
type Stats struct {
	// Fsyncs counts file and directory syncs; FailedFsyncs those answered EIO.
	Fsyncs, FailedFsyncs int
	// FailedWrites counts writes answered EIO; NoSpace operations answered ENOSPC.
	FailedWrites, NoSpace int
	// PagesSaved counts pages whose synced content was saved before a first overwrite.
	PagesSaved int
	// DirOps counts the creates, removes and renames recorded.
	DirOps int
	// PowerCuts counts power cuts.
	PowerCuts int
}

// FS is one fault-injecting mount of a backing directory. Its methods are safe for concurrent
// use.
type FS struct {
	backing, trash, mountPoint string

	mu       sync.Mutex // guards everything below, and is held across each change to the tree
	files    map[uint64]*fileState
	ops      []*nsOp
	trashSeq int
	server   *fuse.Server
	stats    Stats

	failSync, failWrite, noSpace bool
	slowMin, slowMax             time.Duration
	rng                          *rand.Rand
}

// New returns an FS that will mount backing at mountPoint. Both directories are created if
// missing; the trash (where removed entries wait for their directory's fsync) is a sibling of
// backing, on the same file system.
func New(backing, mountPoint string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	f := &FS{backing: backing, trash: backing + ".trash", mountPoint: mountPoint,
		files: map[uint64]*fileState{}, rng: rand.New(rand.NewSource(time.Now().UnixNano()))}
	for _, d := range []string{backing, f.trash, mountPoint} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("faultfs: %w", err)
		}
	}
	return f, nil
}

// MountPoint is where the FS is (or will be) mounted.
func (f *FS) MountPoint() string { return f.mountPoint }

// Mount mounts the FS. It needs /dev/fuse and the right to mount (root, or fusermount).
func (f *FS) Mount() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.server != nil {
		return errors.New("faultfs: already mounted")
	}
	root := &fs.LoopbackRoot{Path: f.backing}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, fs: f}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.backing, &st); err != nil {
		return fmt.Errorf("faultfs: %w", err)
	}
	root.Dev = uint64(st.Dev)
	root.RootNode = root.NewNode(root, nil, "", &st)
	zero := time.Duration(0)
	srv, err := fs.Mount(f.mountPoint, root.RootNode, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{FsName: "faultfs", Name: "faultfs", DirectMount: true,
			DisableXAttrs: true, MaxBackground: 64},
	})
	if err != nil {
		return fmt.Errorf("faultfs: mount %s: %w", f.mountPoint, err)
	}
	f.server = srv
	return nil
}

// unmountPatience bounds how long Unmount retries a busy mount. A killed process's files are
// released by the kernel after it is reaped, so a mount can stay busy for a moment after the
// last user exits, longer on a loaded machine than go-fuse's own retries (about 0.3 s) wait.
const unmountPatience = 15 * time.Second

// Unmount unmounts the FS; nothing may have files open in it. It retries, for a bounded time,
// while the unmount fails (the kernel still reports the mount busy). Unsynced state is kept: a power cut after
// Unmount still undoes it.
func (f *FS) Unmount() error {
	f.mu.Lock()
	srv := f.server
	f.server = nil
	f.mu.Unlock()
	if srv == nil {
		return nil
	}
	deadline := time.Now().Add(unmountPatience)
	for {
		err := srv.Unmount()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			f.mu.Lock()
			f.server = srv
			f.mu.Unlock()
			return fmt.Errorf("faultfs: unmount %s: %w", f.mountPoint, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// PowerCut loses, as a power cut would, every write and directory change not yet made
// durable by an fsync. Whatever used the FS must have stopped (been killed): PowerCut
// unmounts it, undoes the unsynced state in the backing directory, and mounts it again if it
// was mounted, like a machine that reboots.
func (f *FS) PowerCut() (CutReport, error) {
	f.mu.Lock()
	mounted := f.server != nil
	f.mu.Unlock()
	if mounted {
		if err := f.Unmount(); err != nil {
			return CutReport{}, err
		}
	}
	f.mu.Lock()
	rep, err := f.undoAll()
	f.stats.PowerCuts++
	f.mu.Unlock()
	if err != nil {
		return rep, err
	}
	if mounted {
		return rep, f.Mount()
	}
	return rep, nil
}

// FailFsync makes every fsync fail with EIO while on; the data it was to make durable is lost
// to a later power cut even if a later fsync succeeds.
func (f *FS) FailFsync(on bool) {
	f.mu.Lock()
	f.failSync = on
	f.mu.Unlock()
}

// FailWrites makes every write fail with EIO while on.
func (f *FS) FailWrites(on bool) {
	f.mu.Lock()
	f.failWrite = on
	f.mu.Unlock()
}

// NoSpace makes every operation that needs new space (a write or fallocate past the end of a
// file, growing truncate, create, mkdir) fail with ENOSPC while on. Overwrites of existing
// content still succeed, as on a full disk.
func (f *FS) NoSpace(on bool) {
	f.mu.Lock()
	f.noSpace = on
	f.mu.Unlock()
}

// SlowFsync makes every fsync take a random time in [lo, hi]; zero turns it off.
func (f *FS) SlowFsync(lo, hi time.Duration) {
	f.mu.Lock()
	f.slowMin, f.slowMax = lo, hi
	f.mu.Unlock()
}

// Heal turns every fault off.
func (f *FS) Heal() {
	f.mu.Lock()
	f.failSync, f.failWrite, f.noSpace = false, false, false
	f.slowMin, f.slowMax = 0, 0
	f.mu.Unlock()
}

// Stats returns the counts so far.
func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Unsynced reports how many files have writes and how many directory operations are pending
// that a power cut would undo.
func (f *FS) Unsynced() (files, dirOps int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.files), len(f.ops)
}

// syncDelay draws the delay of one fsync. The caller holds f.mu.
func (f *FS) syncDelay() time.Duration {
	if f.slowMax <= 0 {
		return 0
	}
	if f.slowMax <= f.slowMin {
		return f.slowMin
	}
	return f.slowMin + time.Duration(f.rng.Int63n(int64(f.slowMax-f.slowMin)))
}

// Available reports whether a FUSE file system can be mounted here, and if not, why.
func Available() error {
	dir, err := os.MkdirTemp("", "faultfs-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f, err := New(filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"))
	if err != nil {
		return err
	}
	if err := f.Mount(); err != nil {
		return err
	}
	return f.Unmount()
}
