//go:build linux

package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/bench"
	jcluster "github.com/raftlock/raftlock/jepsen/cluster"
)

var (
	benchWatchers = flag.Int("watchers", 10_000, "watchers of BenchmarkWatchFanout (streams or polls)")
	benchChanges  = flag.Int("watch-changes", 20, "changes BenchmarkWatchFanout makes")
	benchShared   = flag.Int("watch-shared-streams", 1000, "streams of BenchmarkWatchFanout/shared")
	benchPrefixes = flag.Int("watch-prefixes", 100, "prefixes of each stream of BenchmarkWatchFanout/shared")
)

// BenchmarkWatchFanout measures -watchers watchers of one prefix (10,000 by default) on a
// cluster of three agent processes (Raft straight between them): streams (Server-Sent Events,
// each served by the node it is sent to) and polls (blocking queries), linearizable and stale;
// and, as shared, -watch-shared-streams streams of -watch-prefixes prefixes each (100,000
// watchings by default). It reports the time from a change to the last watcher told, the
// servers' CPU per change and while idle, each node's memory, and for streams another client's
// acquire rate before and with the streams idle. It is the measurement of docs/performance.md;
// run it with -benchtime 1x (each iteration connects every watcher), and pick sub-benchmarks
// with -bench 'BenchmarkWatchFanout/stream' and the like.
func BenchmarkWatchFanout(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	bin, err := jcluster.Build(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	type run struct {
		name               string
		mode               string
		stale              bool
		watchers, prefixes int
	}
	runs := []run{
		{"stream/linearizable", bench.WatchStream, false, *benchWatchers, 1},
		{"stream/stale", bench.WatchStream, true, *benchWatchers, 1},
		{"shared", bench.WatchStream, false, *benchShared, *benchPrefixes},
		{"poll/linearizable", bench.WatchPoll, false, *benchWatchers, 1},
		{"poll/stale", bench.WatchPoll, true, *benchWatchers, 1},
	}
	for _, x := range runs {
		b.Run(x.name, func(b *testing.B) {
			// Every watcher holds a connection and counts as a watch of one client address: lift
			// the agents' default limits of 4,096 connections and 1,024 watches per address.
			eps := startAgents(ctx, b, bin, 3, "--max-connections", "0", "--max-watches-per-address", "0")
			for range b.N {
				rep, err := bench.Run(ctx, bench.Options{Endpoints: eps, Workloads: []string{bench.Watch}, Version: "bench-test",
					Watchers: x.watchers, WatchChanges: *benchChanges, WatchStale: x.stale, Duration: 10 * time.Second,
					WatchModes: []string{x.mode}, WatchPrefixes: x.prefixes})
				if rep != nil {
					var out bytes.Buffer
					_ = rep.WriteTable(&out)
					b.Log("\n" + out.String())
				}
				if err != nil {
					b.Fatal(err)
				}
				w := rep.Watch
				if x.mode == bench.WatchStream {
					w = rep.WatchStream
				}
				reportWatch(b, w)
			}
		})
	}
}

func reportWatch(b *testing.B, w *bench.WatchResult) {
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
	if w.Mode == bench.WatchStream {
		b.ReportMetric(w.HeapAddedPer(w.Watchers), "heap-B/stream")
		b.ReportMetric(w.HeapAddedPer(w.Watchings), "heap-B/watching")
		b.ReportMetric(float64(w.Dropped), "dropped")
		if w.AcquireBefore != nil && w.AcquireWatching != nil && *w.AcquireBefore > 0 {
			b.ReportMetric(*w.AcquireWatching / *w.AcquireBefore, "acquire-rate-ratio")
		}
	}
}

// startAgents starts a cluster of n agent processes of bin on free ports of 127.0.0.1, with the
// extra flags, and returns their endpoints once every node is ready and has published its
// address. Their Raft traffic goes straight from one to the other: through proxies in this
// process, it would wait behind the watchers' goroutines. They are killed when b ends.
func startAgents(ctx context.Context, b *testing.B, bin string, n int, extra ...string) []string {
	b.Helper()
	var lns []net.Listener
	for range 2 * n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns = append(lns, ln)
	}
	addr := func(i int) string { return lns[i].Addr().String() }
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("n%d=%s", i+1, addr(2*i+1)))
	}
	for _, ln := range lns {
		ln.Close()
	}
	dir := b.TempDir()
	var eps []string
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		log, err := os.Create(filepath.Join(dir, id+".log"))
		if err != nil {
			b.Fatal(err)
		}
		args := append([]string{"agent", "--id", id, "--data-dir", filepath.Join(dir, id), "--http-addr", addr(2 * i),
			"--raft-addr", addr(2*i + 1), "--initial-cluster", strings.Join(initial, ","), "--log-level", "warn"}, extra...)
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			log.Close()
		})
		eps = append(eps, "http://"+addr(2*i))
	}
	deadline := time.Now().Add(time.Minute)
	for _, ep := range eps {
		for !published(ctx, ep, n) {
			if time.Now().After(deadline) {
				b.Fatalf("the agents were not ready within a minute; logs in %s", dir)
			}
			time.Sleep(100 * time.Millisecond) // a poll interval
		}
	}
	return eps
}

// published reports whether the node at ep is ready and knows the HTTP addresses of n members.
func published(ctx context.Context, ep string, n int) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep+"/v1/cluster", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var cl api.Cluster
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&cl) != nil || cl.Leader == "" {
		return false
	}
	known := 0
	for _, m := range cl.Members {
		if m.HTTPAddr != "" {
			known++
		}
	}
	return known == n
}
