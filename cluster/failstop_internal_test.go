package cluster

import (
	"errors"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"
)

// TestFailStopStoreStopsAtTheFirstFailedWrite: once a write fails, the failure is reported
// once and every later write is refused without reaching the store, so that a retry can never
// acknowledge what a failed fsync lost.
func TestFailStopStoreStopsAtTheFirstFailedWrite(t *testing.T) {
	for _, kind := range []string{LogStoreWAL, LogStoreBoltDB} {
		t.Run(kind, func(t *testing.T) {
			inner, err := openLogStore(kind, t.TempDir(), 0, false, nil, hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			var reports []error
			s := &failStopStore{logStore: inner, onFail: func(err error) { reports = append(reports, err) }, metrics: newNodeMetrics()}
			if err := s.StoreLogs([]*raft.Log{{Index: 1, Term: 1, Type: raft.LogCommand}}); err != nil {
				t.Fatal(err)
			}
			inner.Close() // every write to it now fails
			err = s.StoreLogs([]*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand}})
			if err == nil || len(reports) != 1 || !errors.Is(reports[0], err) {
				t.Fatalf("a failed append: error %v, reports %v; want the error reported once", err, reports)
			}
			if err := s.SetUint64([]byte("CurrentTerm"), 2); !errors.Is(err, ErrStorageFailed) {
				t.Errorf("a write after the failure: %v, want ErrStorageFailed", err)
			}
			if err := s.DeleteRange(1, 1); !errors.Is(err, ErrStorageFailed) {
				t.Errorf("a delete after the failure: %v, want ErrStorageFailed", err)
			}
			if len(reports) != 1 {
				t.Errorf("%d reports, want 1", len(reports))
			}
			// The failure counts once (later writes never reach the store); the append
			// that succeeded was timed.
			if n := s.metrics.storageFailures.Load(); n != 1 {
				t.Errorf("raftlock_storage_failures_total %d, want 1", n)
			}
			var m dto.Metric
			if err := s.metrics.appendLatency.Write(&m); err != nil || m.GetHistogram().GetSampleCount() != 1 {
				t.Errorf("appends timed: %v (%v), want 1", m.GetHistogram().GetSampleCount(), err)
			}
		})
	}
}

// TestFailStopStoreTellsWhetherTheStoreIsMonotonic: raft clears a monotonic store's log after
// installing a snapshot; a wrapper that hid it made a lagging raft-wal follower's next append
// fail (TestLaggingFollowerCatchesUpThroughSnapshot, wal, about one run in two).
func TestFailStopStoreTellsWhetherTheStoreIsMonotonic(t *testing.T) {
	for kind, want := range map[string]bool{LogStoreWAL: true, LogStoreBoltDB: false} {
		inner, err := openLogStore(kind, t.TempDir(), 0, false, nil, hclog.NewNullLogger())
		if err != nil {
			t.Fatal(err)
		}
		var s raft.LogStore = &failStopStore{logStore: inner, metrics: newNodeMetrics()}
		m, ok := s.(raft.MonotonicLogStore)
		if got := ok && m.IsMonotonic(); got != want {
			t.Errorf("%s: IsMonotonic %v, want %v", kind, got, want)
		}
		inner.Close()
	}
}
