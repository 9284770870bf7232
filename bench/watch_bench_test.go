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
	benchWatchers = flag.Int("watchers", 10_000, "prefix watches of BenchmarkWatchFanout")
	benchChanges  = flag.Int("watch-changes", 20, "changes BenchmarkWatchFanout makes")
)

// BenchmarkWatchFanout measures -watchers prefix watches of one prefix (10,000 by default) on
// a cluster of three agent processes (Raft straight between them), linearizable (followers forward them to the leader) and
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
			eps := startAgents(ctx, b, bin, 3, "--max-connections", "0")
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
				reportWatch(b, rep.Watch)
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
