package cluster

import (
	"bytes"
	"io"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A snapshot's file is fsynced as it is written, every snapshotSyncEvery bytes, so that its
// last fsync never has the whole snapshot to flush (which holds the log's fsyncs behind it);
// the snapshot reads back whole.
func TestSnapshotIsSyncedAsItIsWritten(t *testing.T) {
	dir := t.TempDir()
	files, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	store := durableSnapshots{SnapshotStore: files, dir: filepath.Join(dir, "snapshots")}
	sink, err := store.Create(1, 10, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("raftlock"), (5*snapshotSyncEvery/2)/8) // two and a half steps
	for b := data; len(b) > 0; b = b[min(len(b), 64<<10):] {
		if _, err := sink.Write(b[:min(len(b), 64<<10)]); err != nil {
			t.Fatal(err)
		}
	}
	if got := sink.(*durableSink).syncs; got != 2 {
		t.Fatalf("%d fsyncs while %d bytes were written, want 2 (one every %d)", got, len(data), snapshotSyncEvery)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	back, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(back, data) {
		t.Fatalf("the snapshot read back %d bytes (%v), want the %d written", len(back), err, len(data))
	}
}
