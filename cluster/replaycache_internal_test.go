package cluster

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// replayStore opens a store of kind holding entries 1..n, and a replay cache over it.
func replayStore(t *testing.T, kind string, n uint64) (logStore, *replayCache) {
	t.Helper()
	s, err := openLogStore(kind, t.TempDir(), 0, false, nil, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := uint64(1); i <= n; i++ {
		if err := s.StoreLog(&raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "v%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	return s, newReplayCache(s)
}

// readData reads index through c and returns its data, or the error.
func readData(c raft.LogStore, index uint64) (string, error) {
	var l raft.Log
	if err := c.GetLog(index, &l); err != nil {
		return "", err
	}
	return string(l.Data), nil
}

func TestReplayCacheGivesOutWhatItReadWhileFillingOnce(t *testing.T) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			s, c := replayStore(t, kind, 10)
			c.startFilling()
			for i := uint64(6); i <= 10; i++ {
				if got, err := readData(c, i); err != nil || got != fmt.Sprintf("v%d", i) {
					t.Fatalf("read %d: %q, %v", i, got, err)
				}
			}
			c.stopFilling()
			if got, err := readData(c, 1); err != nil || got != "v1" {
				t.Fatalf("read 1: %q, %v", got, err)
			}
			// Remove 6..10 from the store behind the cache's back: only kept entries still read.
			if err := s.DeleteRange(6, 10); err != nil {
				t.Fatal(err)
			}
			for i := uint64(6); i <= 10; i++ {
				if got, err := readData(c, i); err != nil || got != fmt.Sprintf("v%d", i) {
					t.Fatalf("second read of %d: %q, %v; want it from the cache", i, got, err)
				}
				if _, err := readData(c, i); !errors.Is(err, raft.ErrLogNotFound) {
					t.Fatalf("third read of %d: %v; the cache gives an entry out once", i, err)
				}
			}
		})
	}
}

func TestReplayCacheKeepsNothingOutsideFilling(t *testing.T) {
	s, c := replayStore(t, LogStoreBoltDB, 3)
	if _, err := readData(c, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(3, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := readData(c, 3); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("read after the store dropped it: %v; nothing should have been kept", err)
	}
}

func TestReplayCacheForgetsWhatIsOverwrittenOrDeleted(t *testing.T) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		t.Run(kind, func(t *testing.T) {
			_, c := replayStore(t, kind, 10)
			c.startFilling()
			for i := uint64(8); i <= 10; i++ {
				if _, err := readData(c, i); err != nil {
					t.Fatal(err)
				}
			}
			// A new leader's entries replace the tail, as a follower's log is truncated by raft.
			if err := c.DeleteRange(9, 10); err != nil {
				t.Fatal(err)
			}
			if err := c.StoreLogs([]*raft.Log{{Index: 9, Term: 2, Type: raft.LogCommand, Data: []byte("new9")}}); err != nil {
				t.Fatal(err)
			}
			if got, err := readData(c, 9); err != nil || got != "new9" {
				t.Fatalf("read of the rewritten 9: %q, %v", got, err)
			}
			if _, err := readData(c, 10); !errors.Is(err, raft.ErrLogNotFound) {
				t.Fatalf("read of the deleted 10: %v", err)
			}
			if got, err := readData(c, 8); err != nil || got != "v8" {
				t.Fatalf("read of 8: %q, %v", got, err)
			}
		})
	}
}

func TestReplayCacheForgetsWhatAWriteReplaces(t *testing.T) {
	_, c := replayStore(t, LogStoreBoltDB, 5)
	c.startFilling()
	if _, err := readData(c, 5); err != nil {
		t.Fatal(err)
	}
	// bbolt overwrites in place; raft deletes first, but the cache must not count on it.
	if err := c.StoreLogs([]*raft.Log{{Index: 5, Term: 2, Type: raft.LogCommand, Data: []byte("new5")}}); err != nil {
		t.Fatal(err)
	}
	if got, err := readData(c, 5); err != nil || got != "new5" {
		t.Fatalf("read of the overwritten 5: %q, %v", got, err)
	}
}

func TestReplayCacheTellsWhetherTheStoreIsMonotonic(t *testing.T) {
	for kind, want := range map[string]bool{LogStoreBoltDB: false, LogStoreWAL: true} {
		_, c := replayStore(t, kind, 0)
		if got := c.IsMonotonic(); got != want {
			t.Errorf("%s: IsMonotonic %v, want %v", kind, got, want)
		}
	}
}
