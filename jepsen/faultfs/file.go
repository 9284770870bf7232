package faultfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// file is an open file: the loopback's, with writes and syncs through the FS. It does not
// embed the loopback file, whose PassthroughFd would let the kernel write past the FS.
type file struct {
	lf *fs.LoopbackFile
	fs *FS
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
	_ fs.FileAllocater = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
)

// fd is the backing file descriptor.
func (h *file) fd() int {
	fd, _ := h.lf.PassthroughFd()
	return fd
}

// Read reads from the backing file.
func (h *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return h.lf.Read(ctx, buf, off)
}

// Write saves the synced content it overwrites, then writes through.
func (h *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f := h.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWrite {
		f.stats.FailedWrites++
		return 0, syscall.EIO
	}
	end := off + int64(len(data))
	if f.noSpace {
		var st syscall.Stat_t
		if err := syscall.Fstat(h.fd(), &st); err != nil {
			return 0, fs.ToErrno(err)
		}
		if end > st.Size {
			f.stats.NoSpace++
			return 0, syscall.ENOSPC
		}
	}
	if err := f.capture(h.fd(), off, end); err != nil {
		return 0, syscall.EIO
	}
	return h.lf.Write(ctx, data, off)
}

// Allocate preallocates space; growing the file needs space, and punching or zeroing a range
// changes content a power cut would restore.
func (h *file) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	f := h.fs
	f.mu.Lock()
	defer f.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd(), &st); err != nil {
		return fs.ToErrno(err)
	}
	if f.noSpace && int64(off+size) > st.Size {
		f.stats.NoSpace++
		return syscall.ENOSPC
	}
	const keepSize = 0x01
	if mode&^keepSize != 0 {
		if err := f.capture(h.fd(), int64(off), int64(off+size)); err != nil {
			return syscall.EIO
		}
	} else if mode&keepSize == 0 {
		// Growing the size changes no content, but a power cut goes back to the synced size.
		if err := f.capture(h.fd(), st.Size, st.Size); err != nil {
			return syscall.EIO
		}
	}
	return h.lf.Allocate(ctx, off, size, mode)
}

// Fsync makes the file's writes durable (after any delay), or fails and loses them.
func (h *file) Fsync(context.Context, uint32) syscall.Errno {
	f := h.fs
	failed := f.beginSync()
	defer f.mu.Unlock()
	if failed {
		_ = f.syncFile(h.fd(), true)
		return syscall.EIO
	}
	return fs.ToErrno(f.syncFile(h.fd(), false))
}

// Flush passes a close of a descriptor through.
func (h *file) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

// Release closes the backing file.
func (h *file) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }

// Getattr stats the backing file.
func (h *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}

// Setattr changes attributes of the backing file (a change of size was saved by the node).
func (h *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}

// Lseek seeks in the backing file (for SEEK_DATA and SEEK_HOLE).
func (h *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}
