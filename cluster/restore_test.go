package cluster_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A node whose newest snapshot passes raft's checksum but not the state machine's refuses to
// start, with the state machine's error, instead of serving from an empty state or hanging.
func TestStartFailsWhenTheNewestSnapshotDoesNotDecode(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 1, nil)
	_, n := c.waitLeader()
	s := createSession(t, n, "a", longTTL, 0)
	mustAcquire(t, n, s, "svc/a", "")
	c.stop(0) // snapshots

	dir := newestSnapshotDir(t, c.dirs[0])
	state := filepath.Join(dir, "state.bin")
	data := readFile(t, state)
	data[len(data)/2] ^= 0xff
	writeFile(t, state, data)
	setRaftChecksum(t, dir, data)

	ln := c.listen(0)
	defer ln.Close()
	if n, err := cluster.New(c.config(0, ln)); !errors.Is(err, fsm.ErrSnapshotChecksum) {
		if err == nil {
			n.Close()
		}
		t.Fatalf("start with a corrupt snapshot: %v, want %v", err, fsm.ErrSnapshotChecksum)
	}
}

// When the newest snapshot fails raft's own checksum, raft restores as it would without the
// startup restore: from the older snapshot, then the log after it.
func TestStartFallsBackToTheOlderSnapshot(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 1, nil)
	_, n := c.waitLeader()
	s := createSession(t, n, "a", longTTL, 0)
	for i := range 2 {
		mustAcquire(t, n, s, fmt.Sprintf("svc/%d", i), "")
		if err := n.Raft().Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	mustAcquire(t, n, s, "svc/after", "")
	want := snapshotBytes(t, n)
	c.kill(0)

	state := filepath.Join(newestSnapshotDir(t, c.dirs[0]), "state.bin")
	data := readFile(t, state)
	data[len(data)/2] ^= 0xff
	writeFile(t, state, data)

	c.restart(0)
	_, n = c.waitLeader()
	testkit.Eventually(t, leaderTimeout, "the restarted node to replay its log", func() bool {
		return bytes.Equal(snapshotBytes(t, n), want)
	})
}

// newestSnapshotDir returns the directory of the newest snapshot in a node's data directory.
func newestSnapshotDir(t *testing.T, dataDir string) string {
	t.Helper()
	meta := newestSnapshot(t, dataDir)
	if meta == nil {
		t.Fatalf("no snapshot in %s", dataDir)
	}
	return filepath.Join(dataDir, "snapshots", meta.ID)
}

// newestSnapshot returns the metadata of the newest snapshot in a node's data directory, or
// nil if it holds none.
func newestSnapshot(t testing.TB, dataDir string) *raft.SnapshotMeta {
	t.Helper()
	store, err := raft.NewFileSnapshotStore(dataDir, 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := store.List() // newest first
	if err != nil {
		t.Fatalf("listing the snapshots in %s: %v", dataDir, err)
	}
	if len(list) == 0 {
		return nil
	}
	return list[0]
}

// setRaftChecksum rewrites the checksum that raft keeps in a snapshot's metadata to match data.
func setRaftChecksum(t *testing.T, dir string, data []byte) {
	t.Helper()
	path := filepath.Join(dir, "meta.json")
	var meta map[string]any
	if err := json.Unmarshal(readFile(t, path), &meta); err != nil {
		t.Fatal(err)
	}
	h := crc64.New(crc64.MakeTable(crc64.ECMA))
	h.Write(data)
	meta["CRC"] = h.Sum(nil) // []byte marshals to base64, as raft writes it
	out, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, out)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
