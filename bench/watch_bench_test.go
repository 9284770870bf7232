//go:build linux

package bench_test

import (
	"bytes"
	"context"
	"flag"
	"testing"
	"time"

	"github.com/raftlock/raftlock/bench"
	jcluster "github.com/raftlock/raftlock/jepsen/cluster"
)

var (
	benchWatchers = flag.Int("watchers", 10_000, "prefix watches of BenchmarkWatchFanout")
	benchChanges  = flag.Int("watch-changes", 20, "changes BenchmarkWatchFanout makes")
)

// BenchmarkWatchFanout measures -watchers prefix watches of one prefix (10,000 by default) on
// a cluster of three agent processes, linearizable (followers forward them to the leader) and
// stale (each node answers its own third): the time from a change to the last watcher told,
// the servers' CPU per change and while idle, and each node's memory. It is the measurement
// of docs/performance.md; run it with -benchtime 1x (each iteration connects every watcher).
func BenchmarkWatchFanout(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	bin, err := jcluster.Build(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, stale := range []bool{false, true} {
		name := "linearizable"
		if stale {
			name = "stale"
		}
		b.Run(name, func(b *testing.B) {
			// Every watch holds a connection: lift the agents' default limit of 4,096.
			c, err := jcluster.Start(ctx, jcluster.Options{Binary: bin, Dir: b.TempDir(), Nodes: 3, LogLevel: "warn",
				ExtraArgs: []string{"--max-connections", "0"}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var eps []string
			for _, n := range c.Nodes {
				eps = append(eps, "http://"+n.HTTPAddr)
			}
			for range b.N {
				rep, err := bench.Run(ctx, bench.Options{Endpoints: eps, Workloads: []string{bench.Watch}, Version: "bench-test",
					Watchers: *benchWatchers, WatchChanges: *benchChanges, WatchStale: stale, Duration: 10 * time.Second})
				if rep != nil {
					var out bytes.Buffer
					_ = rep.WriteTable(&out)
					b.Log("\n" + out.String())
				}
				if err != nil {
					b.Fatal(err)
				}
				w := rep.Watch
				b.ReportMetric(w.Last.P50, "last-told-p50-ms")
				b.ReportMetric(w.Last.P99, "last-told-p99-ms")
				if w.CPUPerChangeMs != nil {
					b.ReportMetric(*w.CPUPerChangeMs, "cpu-ms/change")
				}
				if w.IdleCPUPercent != nil {
					b.ReportMetric(*w.IdleCPUPercent, "idle-cpu-%")
				}
				for _, n := range w.Nodes {
					if n.Leader {
						b.ReportMetric((n.RSSWatching-n.RSSBefore)/(1<<20), "leader-rss-added-MiB")
					}
				}
			}
		})
	}
}
