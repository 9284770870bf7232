package cluster_test

import (
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
			// With its own store it opens, with its state.
			c.restart(0)
			_, leader = c.waitLeader()
			if got := len(leader.FSM().Sessions()); got != 1 {
				t.Fatalf("after reopening: %d sessions, want 1", got)
			}
		})
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
