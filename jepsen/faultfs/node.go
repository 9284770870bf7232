package faultfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a file or directory of the FS: go-fuse's loopback node, with every change to the
// tree recorded so that a power cut can undo it.
type node struct {
	fs.LoopbackNode
	fs *FS
}

var (
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
)

// path is the node's path in the backing directory.
func (n *node) path() string {
	return filepath.Join(n.RootData.Path, n.Path(n.RootData.RootNode.EmbeddedInode()))
}

// ino is the backing inode number of the node.
func (n *node) ino() (uint64, syscall.Errno) {
	ino, err := inoOf(n.path())
	return ino, fs.ToErrno(err)
}

// Create creates (or opens) a file, recording the new directory entry.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, errno := n.ino()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	p := filepath.Join(n.path(), name)
	_, statErr := os.Lstat(p)
	existed := statErr == nil
	if !existed && f.noSpace {
		f.stats.NoSpace++
		return nil, nil, 0, syscall.ENOSPC
	}
	if existed && flags&syscall.O_TRUNC != 0 {
		if errno := f.captureTruncate(p); errno != 0 {
			return nil, nil, 0, errno
		}
	}
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		f.record(nsOp{kind: opCreate, dir: dir, name: name})
	}
	return ch, &file{lf: fh.(*fs.LoopbackFile), fs: f}, fl, 0
}

// captureTruncate saves the synced content of the file at p before it is truncated to zero.
// The caller holds f.mu.
func (f *FS) captureTruncate(p string) syscall.Errno {
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	return fs.ToErrno(f.capture(fd, 0, -1))
}

// Open opens a file; opening with O_TRUNC is a change that a power cut may undo.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f := n.fs
	if flags&syscall.O_TRUNC != 0 {
		f.mu.Lock()
		errno := f.captureTruncate(n.path())
		f.mu.Unlock()
		if errno != 0 {
			return nil, 0, errno
		}
	}
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &file{lf: fh.(*fs.LoopbackFile), fs: f}, fl, 0
}

// Mkdir creates a directory, recording the new entry.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.addEntry(name, func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Mkdir(ctx, name, mode, out)
	})
}

// Symlink creates a symbolic link, recording the new entry.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.addEntry(name, func() (*fs.Inode, syscall.Errno) {
		return n.LoopbackNode.Symlink(ctx, target, name, out)
	})
}

// addEntry makes the entry name with mk, unless the disk is full, and records it so that a
// power cut can undo it.
func (n *node) addEntry(name string, mk func() (*fs.Inode, syscall.Errno)) (*fs.Inode, syscall.Errno) {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noSpace {
		f.stats.NoSpace++
		return nil, syscall.ENOSPC
	}
	dir, errno := n.ino()
	if errno != 0 {
		return nil, errno
	}
	ch, errno := mk()
	if errno == 0 {
		f.record(nsOp{kind: opCreate, dir: dir, name: name})
	}
	return ch, errno
}

// Unlink removes a file by moving it into the trash until its directory is synced.
func (n *node) Unlink(_ context.Context, name string) syscall.Errno {
	return n.remove(name, false)
}

// Rmdir removes an empty directory by moving it into the trash until its parent is synced.
func (n *node) Rmdir(_ context.Context, name string) syscall.Errno {
	return n.remove(name, true)
}

func (n *node) remove(name string, isDir bool) syscall.Errno {
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, errno := n.ino()
	if errno != 0 {
		return errno
	}
	p := filepath.Join(n.path(), name)
	st, err := os.Lstat(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	switch {
	case isDir && !st.IsDir():
		return syscall.ENOTDIR
	case !isDir && st.IsDir():
		return syscall.EISDIR
	case isDir:
		entries, err := os.ReadDir(p)
		if err != nil {
			return fs.ToErrno(err)
		}
		if len(entries) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	trash, err := f.toTrash(p)
	if err != nil {
		return fs.ToErrno(err)
	}
	f.record(nsOp{kind: opRemove, dir: dir, name: name, trash: trash})
	return 0
}

// Rename moves an entry; one it replaces goes into the trash until both directories are synced.
func (n *node) Rename(_ context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^uint32(unix.RENAME_NOREPLACE) != 0 {
		return syscall.ENOTSUP
	}
	f := n.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, errno := n.ino()
	if errno != 0 {
		return errno
	}
	dir2, errno := np.ino()
	if errno != 0 {
		return errno
	}
	from, to := filepath.Join(n.path(), name), filepath.Join(np.path(), newName)
	src, err := os.Lstat(from)
	if err != nil {
		return fs.ToErrno(err)
	}
	op := nsOp{kind: opRename, dir: dir, name: name, dir2: dir2, name2: newName}
	if dst, err := os.Lstat(to); err == nil {
		if flags&unix.RENAME_NOREPLACE != 0 {
			return syscall.EEXIST
		}
		if os.SameFile(src, dst) {
			return 0
		}
		if dst.IsDir() != src.IsDir() {
			if dst.IsDir() {
				return syscall.EISDIR
			}
			return syscall.ENOTDIR
		}
		if dst.IsDir() {
			if entries, err := os.ReadDir(to); err != nil || len(entries) > 0 {
				return syscall.ENOTEMPTY
			}
		}
		if op.trash, err = f.toTrash(to); err != nil {
			return fs.ToErrno(err)
		}
	}
	if err := os.Rename(from, to); err != nil {
		if op.trash != "" {
			_ = os.Rename(filepath.Join(f.trash, op.trash), to)
		}
		return fs.ToErrno(err)
	}
	f.record(op)
	return 0
}

// Setattr changes attributes; a change of size is a write that a power cut may undo.
func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		f := n.fs
		f.mu.Lock()
		errno := f.resize(n.path(), fh, int64(size))
		f.mu.Unlock()
		if errno != 0 {
			return errno
		}
	}
	return n.LoopbackNode.Setattr(ctx, fh, in, out)
}

// resize saves what a truncation to size would cut off, or refuses growth when the disk is
// full. The caller holds f.mu.
func (f *FS) resize(path string, fh fs.FileHandle, size int64) syscall.Errno {
	fd := -1
	if h, ok := fh.(*file); ok {
		if got, ok := h.lf.PassthroughFd(); ok {
			fd = got
		}
	}
	if fd < 0 {
		var err error
		if fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			return fs.ToErrno(err)
		}
		defer syscall.Close(fd)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	if size > st.Size && f.noSpace {
		f.stats.NoSpace++
		return syscall.ENOSPC
	}
	return fs.ToErrno(f.capture(fd, size, -1))
}

// Fsync makes a file's writes durable, or a directory's entries.
func (n *node) Fsync(_ context.Context, fh fs.FileHandle, _ uint32) syscall.Errno {
	if n.IsDir() {
		return n.fs.fsyncDir(n)
	}
	h, ok := fh.(*file)
	if !ok {
		return syscall.EBADF
	}
	return h.Fsync(context.Background(), 0)
}

// fsyncDir makes the pending entries of directory n durable (after any delay), or fails.
func (f *FS) fsyncDir(n *node) syscall.Errno {
	failed := f.beginSync()
	defer f.mu.Unlock()
	if failed {
		return syscall.EIO
	}
	ino, errno := n.ino()
	if errno != 0 {
		return errno
	}
	f.syncDir(ino)
	return 0
}

// beginSync waits out the sync delay in force, then takes f.mu, which the caller releases, and
// counts an fsync; true means the fsync is to fail (and is counted as failed).
func (f *FS) beginSync() (failed bool) {
	f.mu.Lock()
	delay := f.syncDelay()
	f.mu.Unlock()
	sleep(delay)
	f.mu.Lock()
	f.stats.Fsyncs++
	if f.failSync {
		f.stats.FailedFsyncs++
		return true
	}
	return false
}

// OpendirHandle opens a directory with a handle whose fsync goes through the FS.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{inner: h, n: n}, fl, 0
}

// CopyFileRange is refused, so that the kernel copies through reads and writes the FS sees.
func (n *node) CopyFileRange(context.Context, fs.FileHandle, uint64, *fs.Inode, fs.FileHandle, uint64, uint64, uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

// Link is refused: the FS tracks files by a single name.
func (n *node) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Mknod is refused.
func (n *node) Mknod(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

// Tmpfile is refused.
func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.ENOTSUP
}

// sleep waits d; a slow fsync is the fault being injected.
func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}

// dirHandle is an open directory: the loopback's stream, with fsync through the FS.
type dirHandle struct {
	inner fs.FileHandle
	n     *node
}

// Readdirent returns the next entry.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.inner.(fs.FileReaddirenter).Readdirent(ctx)
}

// Seekdir moves the stream.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if s, ok := d.inner.(fs.FileSeekdirer); ok {
		return s.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

// Releasedir closes the stream.
func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if r, ok := d.inner.(fs.FileReleasedirer); ok {
		r.Releasedir(ctx, flags)
	}
}

// Fsyncdir makes the directory's pending entries durable.
func (d *dirHandle) Fsyncdir(context.Context, uint32) syscall.Errno { return d.n.fs.fsyncDir(d.n) }
