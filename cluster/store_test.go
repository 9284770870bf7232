package cluster_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/cluster"
)

// logStores are the Raft log stores a node can keep; tests of durability run on each.
var logStores = []string{cluster.LogStoreBoltDB, cluster.LogStoreWAL}

// forEachLogStore runs test once per log store, as parallel subtests named after the store.
func forEachLogStore(t *testing.T, test func(t *testing.T, store string)) {
	for _, store := range logStores {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			test(t, store)
		})
	}
}

// A data directory keeps the log store it was made with: opening it with the other kind would
// find an empty log and could bootstrap a second cluster, so it is refused, by name.
func TestDataDirKeepsItsLogStore(t *testing.T) {
	for _, made := range logStores {
		t.Run(made, func(t *testing.T) {
			c := newTestCluster(t, 1, func(cfg *cluster.Config) { cfg.LogStore = made })
			_, leader := c.waitLeader()
			createSession(t, leader, "s", longTTL, 0)
			c.kill(0)

			other := cluster.LogStoreWAL
			if made == cluster.LogStoreWAL {
				other = cluster.LogStoreBoltDB
			}
			cfg := c.config(0, nil)
			cfg.RaftListener, cfg.RaftAddr, cfg.LogStore = nil, "127.0.0.1:0", other
			n, err := cluster.New(cfg)
			if err == nil {
				n.Close()
				t.Fatalf("a %s data dir opened as %s", made, other)
			}
			if !strings.Contains(err.Error(), `"`+made+`"`) {
				t.Fatalf("the refusal does not name the store the data dir holds: %v", err)
			}
			// Without a store named, as after an upgrade that changed the default, it opens
			// with the store it holds, and its state.
			c.tune = func(cfg *cluster.Config) { cfg.LogStore = "" }
			c.restart(0)
			_, leader = c.waitLeader()
			if got := len(leader.FSM().Sessions()); got != 1 {
				t.Fatalf("after reopening: %d sessions, want 1", got)
			}
			if got := mustStatus(t, leader).LogStore; got != made {
				t.Fatalf("reopened with store %q, want %q", got, made)
			}
			for kind, file := range map[string]string{cluster.LogStoreBoltDB: "raft.db", cluster.LogStoreWAL: "wal"} {
				_, err := os.Stat(filepath.Join(c.dirs[0], file))
				if (kind == made) != (err == nil) {
					t.Fatalf("%s made with %s: stat %s: %v", c.dirs[0], made, file, err)
				}
			}
		})
	}
}

// A new data directory gets raft-wal when no store is named.
func TestNewDataDirUsesWAL(t *testing.T) {
	c := newTestCluster(t, 1, func(cfg *cluster.Config) { cfg.LogStore = "" })
	_, leader := c.waitLeader()
	if got := mustStatus(t, leader).LogStore; got != cluster.LogStoreWAL {
		t.Fatalf("new data dir got store %q, want %q", got, cluster.LogStoreWAL)
	}
	if _, err := os.Stat(filepath.Join(c.dirs[0], "wal")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.dirs[0], "raft.db")); err == nil {
		t.Fatal("a new wal data dir also holds raft.db")
	}
}

// A data directory holding both stores is refused: which log is the node's cannot be known.
func TestDataDirWithBothStoresIsRefused(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"raft.db", "wal"} {
		if err := os.Mkdir(filepath.Join(dir, p), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	cfg := cluster.Config{ID: "n1", DataDir: dir, RaftAddr: "127.0.0.1:0", AdvertiseHTTP: "127.0.0.1:1"}
	if n, err := cluster.New(cfg); err == nil {
		n.Close()
		t.Fatal("a data dir with both stores opened")
	} else if !strings.Contains(err.Error(), "both") {
		t.Fatalf("the refusal does not say why: %v", err)
	}
}

func TestUnknownLogStoreIsRefused(t *testing.T) {
	cfg := cluster.Config{ID: "n1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", AdvertiseHTTP: "127.0.0.1:1", LogStore: "leveldb"}
	if n, err := cluster.New(cfg); err == nil {
		n.Close()
		t.Fatal("log store leveldb accepted")
	} else if !strings.Contains(err.Error(), "leveldb") {
		t.Fatalf("the error does not name the bad store: %v", err)
	}
}

func mustStatus(t *testing.T, n *cluster.Node) cluster.Status {
	t.Helper()
	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	return st
}
