package faultfs_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen/faultfs"
)

// mount mounts a new FS for the test, or skips the test where FUSE is not available.
func mount(t *testing.T) (*faultfs.FS, string) {
	t.Helper()
	if err := faultfs.Available(); err != nil {
		t.Skipf("FUSE is not available here (%v): the fault-injecting file system cannot be tested", err)
	}
	dir := t.TempDir()
	f, err := faultfs.New(filepath.Join(dir, "backing"), filepath.Join(dir, "mnt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Mount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f, f.MountPoint()
}

func write(t *testing.T, path, data string, syncFile bool) {
	t.Helper()
	fh, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if syncFile {
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

func cut(t *testing.T, f *faultfs.FS) faultfs.CutReport {
	t.Helper()
	rep, err := f.PowerCut()
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// content returns the file's content, or "<missing>".
func content(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return "<missing>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func expect(t *testing.T, path, want string) {
	t.Helper()
	if got := content(t, path); got != want {
		t.Errorf("%s after the power cut: %q, want %q", filepath.Base(path), got, want)
	}
}

func TestUnsyncedWritesAreLost(t *testing.T) {
	f, mnt := mount(t)
	p := filepath.Join(mnt, "log")
	write(t, p, "synced.", true)
	syncDir(t, mnt)
	write(t, p, "unsynced", false)
	if got := content(t, p); got != "synced.unsynced" {
		t.Fatalf("before the cut the program must see its writes, got %q", got)
	}
	rep := cut(t, f)
	expect(t, p, "synced.")
	if rep.Files != 1 || rep.Truncated != 1 {
		t.Errorf("report %+v, want one file cut back to its synced size", rep)
	}
}

func TestOverwriteWithoutSyncIsRestored(t *testing.T) {
	f, mnt := mount(t)
	p := filepath.Join(mnt, "db")
	old := bytes.Repeat([]byte("a"), 3*4096+100)
	if err := os.WriteFile(p, old, 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	if _, err := fh.WriteAt(bytes.Repeat([]byte("b"), 5000), 4000); err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(2000); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	cut(t, f)
	if got := content(t, p); got != string(old) {
		t.Errorf("after the cut the file has %d bytes (%q...), want the synced %d bytes of a", len(got), got[:min(len(got), 8)], len(old))
	}
}

func TestCreateNeedsTheDirectorySync(t *testing.T) {
	f, mnt := mount(t)
	p := filepath.Join(mnt, "new")
	write(t, p, "data", true) // the file is synced, its directory entry is not
	cut(t, f)
	expect(t, p, "<missing>")

	write(t, p, "data", true)
	syncDir(t, mnt)
	cut(t, f)
	expect(t, p, "data")
}

func TestRenameWithoutDirectorySyncKeepsTheOldName(t *testing.T) {
	f, mnt := mount(t)
	final, tmp := filepath.Join(mnt, "final"), filepath.Join(mnt, "final.tmp")
	write(t, final, "v1", true)
	write(t, tmp, "v2", true)
	syncDir(t, mnt)
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	expect(t, final, "v2")
	cut(t, f)
	expect(t, final, "v1")
	expect(t, tmp, "v2")

	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	cut(t, f)
	expect(t, final, "v2")
	expect(t, tmp, "<missing>")
}

func TestRemoveWithoutDirectorySyncComesBack(t *testing.T) {
	f, mnt := mount(t)
	sub := filepath.Join(mnt, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(sub, "f")
	write(t, p, "kept", true)
	syncDir(t, sub)
	syncDir(t, mnt)
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	cut(t, f)
	expect(t, p, "kept")

	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	syncDir(t, sub)
	cut(t, f)
	expect(t, p, "<missing>")
}

func TestNewDirectoryNeedsItsParentSync(t *testing.T) {
	f, mnt := mount(t)
	sub := filepath.Join(mnt, "snap.tmp")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(sub, "state.bin")
	write(t, p, "state", true)
	syncDir(t, sub)
	// The directory holds a synced file, but its own entry in mnt was never synced.
	cut(t, f)
	if _, err := os.Stat(sub); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory after the cut: %v, want it gone", err)
	}
}

func TestRenamedDirectoryLosesEntriesNotSyncedInIt(t *testing.T) {
	// hashicorp/raft's snapshot store: files created in dir.tmp, synced, dir.tmp renamed to
	// dir and the parent synced, but dir itself never synced.
	f, mnt := mount(t)
	tmp, final := filepath.Join(mnt, "1-2.tmp"), filepath.Join(mnt, "1-2")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(tmp, "meta.json"), "{}", true)
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	syncDir(t, mnt)
	cut(t, f)
	if _, err := os.Stat(final); err != nil {
		t.Fatalf("renamed directory after the cut: %v", err)
	}
	expect(t, filepath.Join(final, "meta.json"), "<missing>")
}

func TestFailedFsyncLosesItsDataForGood(t *testing.T) {
	f, mnt := mount(t)
	p := filepath.Join(mnt, "wal")
	write(t, p, "a", true)
	syncDir(t, mnt)
	fh, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteString("b"); err != nil {
		t.Fatal(err)
	}
	f.FailFsync(true)
	if err := fh.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync under the fault: %v, want EIO", err)
	}
	f.Heal()
	if err := fh.Sync(); err != nil {
		t.Fatalf("fsync after healing: %v", err)
	}
	fh.Close()
	cut(t, f)
	// "b" shared its page with the synced "a" and was never rewritten: a retried fsync that
	// succeeds makes the new size durable, but not the lost page.
	expect(t, p, "a\x00")
	if s := f.Stats(); s.FailedFsyncs != 1 {
		t.Errorf("stats %+v, want one failed fsync", s)
	}
}

func TestFullDiskRefusesNewSpaceOnly(t *testing.T) {
	f, mnt := mount(t)
	p := filepath.Join(mnt, "seg")
	if err := os.WriteFile(p, make([]byte, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	f.NoSpace(true)
	defer f.Heal()
	fh, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt([]byte("x"), 10); err != nil {
		t.Errorf("overwrite on a full disk: %v, want it to succeed", err)
	}
	if _, err := fh.WriteAt([]byte("x"), 100); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("append on a full disk: %v, want ENOSPC", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new"), nil, 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("create on a full disk: %v, want ENOSPC", err)
	}
	if err := os.Mkdir(filepath.Join(mnt, "d"), 0o755); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("mkdir on a full disk: %v, want ENOSPC", err)
	}
}

func TestFailedWrite(t *testing.T) {
	f, mnt := mount(t)
	p := filepath.Join(mnt, "f")
	write(t, p, "a", true)
	f.FailWrites(true)
	defer f.Heal()
	fh, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt([]byte("b"), 0); !errors.Is(err, syscall.EIO) {
		t.Errorf("write under the fault: %v, want EIO", err)
	}
}

func TestSlowFsync(t *testing.T) {
	f, mnt := mount(t)
	p := filepath.Join(mnt, "f")
	const d = 50 * time.Millisecond
	f.SlowFsync(d, d)
	start := time.Now()
	write(t, p, "a", true)
	if took := time.Since(start); took < d {
		t.Errorf("fsync took %s, want at least the %s set", took, d)
	}
}
