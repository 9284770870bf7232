package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/bench"
)

// TestWatchWorkload runs the watch workload briefly against an in-process cluster: every
// watcher must get every change, and the figures must be there. It measures nothing: the
// figures come from BenchmarkWatchFanout and the command.
func TestWatchWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{})
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	defer dev.Close()
	if _, err := bench.ParseWorkloads("all,watch"); err != nil {
		t.Fatal(err)
	}
	if w, _ := bench.ParseWorkloads("all"); len(w) != len(bench.AllWorkloads()) {
		t.Fatalf("all is %v: the watch workload must be asked for by name", w)
	}
	for _, stale := range []bool{false, true} {
		rep, err := bench.Run(ctx, bench.Options{Endpoints: dev.Endpoints(), Dev: dev, Workloads: []string{bench.Watch},
			Watchers: 30, WatchChanges: 4, WatchStale: stale, Duration: 300 * time.Millisecond, Version: "test"})
		if err != nil {
			t.Fatalf("Run (stale %v): %v", stale, err)
		}
		for _, w := range []*bench.WatchResult{rep.Watch, rep.WatchStream} {
			if w == nil || w.Missed != 0 || w.OutOfOrder != 0 || w.Resets != 0 || w.Dropped != 0 || w.Last.Count != 4 || w.Last.P50 < w.First.P50 ||
				len(w.Nodes) != 3 || w.CPUPerChangeMs == nil || w.IdleCPUPercent == nil {
				t.Fatalf("watch figures (stale %v): %+v", stale, w)
			}
		}
		if s := rep.WatchStream; s.Mode != bench.WatchStream || s.AcquireBefore == nil || s.AcquireWatching == nil || s.Watchings != 30 {
			t.Fatalf("stream figures (stale %v): %+v", stale, s)
		}
		checkTable(t, rep, "watch (streams)", "watch (polls)", "last told p50", "with watchers", "include the watchers' own", "per watching")
	}
	// Many prefixes on each stream: every change reaches every stream, over POST /v1/watch.
	rep, err := bench.Run(ctx, bench.Options{Endpoints: dev.Endpoints(), Dev: dev, Workloads: []string{bench.Watch},
		WatchModes: []string{bench.WatchStream}, Watchers: 10, WatchPrefixes: 5, WatchChanges: 10, Duration: 300 * time.Millisecond, Version: "test"})
	if err != nil {
		t.Fatalf("Run (5 prefixes a stream): %v", err)
	}
	if w := rep.WatchStream; w == nil || rep.Watch != nil || w.Missed != 0 || w.OutOfOrder != 0 || w.Dropped != 0 || w.Watchings != 50 || w.Last.Count != 10 {
		t.Fatalf("watch figures (5 prefixes a stream): %+v", w)
	}
}
