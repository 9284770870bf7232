package faultfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// pageSize is the unit in which old file content is saved before it is first overwritten.
const pageSize = 4096

// fileState is what a power cut would restore of one file: its size and the old content of
// the pages written since its last successful sync. fd is the FS's own read-write descriptor
// of the file, open while there is something to restore, so that renames and removes do not
// lose track of it.
type fileState struct {
	fd    int
	size  int64
	pages map[int64]*page
}

// page is the synced content of one page of a file.
type page struct {
	data []byte
	// lost marks a page whose writeback failed (an fsync returned EIO) and that was not
	// written since: a later successful sync does not save it.
	lost bool
}

// opKind names a directory operation that a power cut may undo.
type opKind int

const (
	opCreate opKind = iota // a file, symlink or directory was created
	opRemove               // a file or an empty directory was removed (kept in the trash)
	opRename               // a name was moved, perhaps replacing another (kept in the trash)
)

// nsOp is a directory operation not yet durable. Directories are named by inode number, so
// that a later rename of the directory does not lose them.
type nsOp struct {
	kind       opKind
	dir, dir2  uint64 // the directory (of the source, for a rename) and a rename's target directory
	name       string // the entry (a rename's source)
	name2      string // a rename's target name
	trash      string // where the removed entry, or the entry a rename replaced, is kept
	waitingFor map[uint64]bool
}

// inoOf returns the inode number of path, without following a final symlink.
func inoOf(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// capture saves, before a change to [off, end) of the file open as fd, the synced content of
// the pages it touches. end < 0 means to the end of the synced size (a truncation).
// The caller holds f.mu.
func (f *FS) capture(fd int, off, end int64) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	s := f.files[st.Ino]
	if s == nil {
		own, err := syscall.Open("/proc/self/fd/"+strconv.Itoa(fd), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("faultfs: reopen: %w", err)
		}
		s = &fileState{fd: own, size: st.Size, pages: map[int64]*page{}}
		f.files[st.Ino] = s
	}
	if end < 0 || end > s.size {
		end = s.size
	}
	for p := off / pageSize; p*pageSize < end; p++ {
		if pg, ok := s.pages[p]; ok {
			pg.lost = false
			continue
		}
		n := min(int64(pageSize), s.size-p*pageSize)
		buf := make([]byte, n)
		if _, err := syscall.Pread(s.fd, buf, p*pageSize); err != nil {
			return fmt.Errorf("faultfs: save page: %w", err)
		}
		s.pages[p] = &page{data: buf}
		f.stats.PagesSaved++
	}
	return nil
}

// syncFile makes the file open as fd durable, or, when failed is set, records that its
// unsynced pages are lost for good. The caller holds f.mu.
func (f *FS) syncFile(fd int, failed bool) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	s := f.files[st.Ino]
	if s == nil {
		return nil
	}
	if failed {
		for _, pg := range s.pages {
			pg.lost = true
		}
		return nil
	}
	for p, pg := range s.pages {
		if !pg.lost {
			delete(s.pages, p)
		}
	}
	s.size = st.Size
	if len(s.pages) == 0 {
		syscall.Close(s.fd)
		delete(f.files, st.Ino)
	}
	return nil
}

// record adds a directory operation that waits for the fsync of its directories.
// The caller holds f.mu.
func (f *FS) record(op nsOp) {
	op.waitingFor = map[uint64]bool{op.dir: true}
	if op.kind == opRename {
		op.waitingFor[op.dir2] = true
	}
	f.ops = append(f.ops, &op)
	f.stats.DirOps++
}

// syncDir makes durable every pending operation that waited only for this directory.
// The caller holds f.mu.
func (f *FS) syncDir(ino uint64) {
	kept := f.ops[:0]
	for _, op := range f.ops {
		delete(op.waitingFor, ino)
		if len(op.waitingFor) > 0 {
			kept = append(kept, op)
			continue
		}
		if op.trash != "" {
			f.dropTrash(op.trash)
		}
	}
	for i := len(kept); i < len(f.ops); i++ {
		f.ops[i] = nil
	}
	f.ops = kept
}

// toTrash moves path aside into the trash and returns its name there.
func (f *FS) toTrash(path string) (string, error) {
	f.trashSeq++
	name := strconv.Itoa(f.trashSeq)
	if err := os.Rename(path, filepath.Join(f.trash, name)); err != nil {
		return "", err
	}
	return name, nil
}

// dropTrash deletes an entry of the trash for good, forgetting the files inside it.
func (f *FS) dropTrash(name string) {
	p := filepath.Join(f.trash, name)
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink <= 1 {
				f.forget(st.Ino)
			}
		}
		return nil
	})
	os.RemoveAll(p)
}

// forget drops what a power cut would restore of a file.
func (f *FS) forget(ino uint64) {
	if s := f.files[ino]; s != nil {
		syscall.Close(s.fd)
		delete(f.files, ino)
	}
}

// CutReport says what a power cut undid.
type CutReport struct {
	// Files is how many files lost writes; Bytes is how much synced content was restored
	// (whole pages) and Truncated how many files went back to a different size.
	Files, Bytes, Truncated int
	// DirOps is how many creates, removes and renames were undone; Skipped how many of them
	// could not be (their directory was gone for good).
	DirOps, Skipped int
}

// String renders the report on one line.
func (r CutReport) String() string {
	s := fmt.Sprintf("%d files lost writes (%d bytes restored, %d resized), %d directory operations undone", r.Files, r.Bytes, r.Truncated, r.DirOps)
	if r.Skipped > 0 {
		s += fmt.Sprintf(" (%d of them in directories already gone for good)", r.Skipped)
	}
	return s
}

// undoAll restores every file to its synced content, then undoes the pending directory
// operations, newest first. The caller holds f.mu and has unmounted the FS.
func (f *FS) undoAll() (CutReport, error) {
	var rep CutReport
	for ino, s := range f.files {
		changed := len(s.pages) > 0
		for p, pg := range s.pages {
			data := pg.data
			if want := min(int64(pageSize), s.size-p*pageSize); int64(len(data)) < want {
				// A lost page under a size synced later: the disk holds zeros past its old end.
				data = append(data, make([]byte, want-int64(len(data)))...)
			}
			if _, err := syscall.Pwrite(s.fd, data, p*pageSize); err != nil {
				return rep, fmt.Errorf("faultfs: restore page: %w", err)
			}
			rep.Bytes += len(data)
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(s.fd, &st); err != nil {
			return rep, err
		}
		if st.Size != s.size {
			if err := syscall.Ftruncate(s.fd, s.size); err != nil {
				return rep, fmt.Errorf("faultfs: restore size: %w", err)
			}
			rep.Truncated++
			changed = true
		}
		if changed {
			rep.Files++
		}
		f.forget(ino)
	}
	for i := len(f.ops) - 1; i >= 0; i-- {
		if err := f.undo(f.ops[i]); err != nil {
			rep.Skipped++
		}
		rep.DirOps++
	}
	f.ops = nil
	entries, err := os.ReadDir(f.trash)
	if err != nil {
		return rep, err
	}
	for _, e := range entries {
		os.RemoveAll(filepath.Join(f.trash, e.Name()))
	}
	return rep, nil
}

// undo reverses one directory operation on the backing tree.
func (f *FS) undo(op *nsOp) error {
	dirs, err := f.dirsByIno()
	if err != nil {
		return err
	}
	dir, ok := dirs[op.dir]
	if !ok {
		return fmt.Errorf("faultfs: directory %d is gone", op.dir)
	}
	switch op.kind {
	case opCreate:
		return os.RemoveAll(filepath.Join(dir, op.name))
	case opRemove:
		return os.Rename(filepath.Join(f.trash, op.trash), filepath.Join(dir, op.name))
	}
	dir2, ok := dirs[op.dir2]
	if !ok {
		return fmt.Errorf("faultfs: directory %d is gone", op.dir2)
	}
	if err := os.Rename(filepath.Join(dir2, op.name2), filepath.Join(dir, op.name)); err != nil {
		return err
	}
	if op.trash != "" {
		return os.Rename(filepath.Join(f.trash, op.trash), filepath.Join(dir2, op.name2))
	}
	return nil
}

// dirsByIno maps the inode number of every directory of the backing tree to its path.
func (f *FS) dirsByIno() (map[uint64]string, error) {
	out := map[uint64]string{}
	err := filepath.WalkDir(f.backing, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		ino, err := inoOf(p)
		if err != nil {
			return err
		}
		out[ino] = p
		return nil
	})
	return out, err
}
