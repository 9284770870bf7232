package cluster_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// BenchmarkRestartWith1MLocks restarts a whole three-node cluster that holds 1,000,000 locks:
// every node stops, then all start again together from their data directories (latest
// snapshot plus the log after it). The nodes stop by crashing (Close), or gracefully
// (Shutdown, which snapshots first). open-s is the time until every node is open (snapshot
// restored, log scanned), leader-s until one leads, and restart-s until a new acquire is
// granted; replayed counts the entries of the old log the new leader applied after its
// snapshot. All three nodes share this machine's cores while they restore.
// Building the state takes a minute or two; run it with -benchtime=1x.
func BenchmarkRestartWith1MLocks(b *testing.B) {
	for _, store := range logStores {
		for _, graceful := range []bool{false, true} {
			name := store + "/crash"
			if graceful {
				name = store + "/graceful"
			}
			b.Run(name, func(b *testing.B) {
				for range b.N {
					benchRestart(b, store, 1_000_000, graceful, nil)
				}
			})
		}
	}
}

// BenchmarkRestartWithLongLog restarts a crashed three-node cluster whose 100,000 grants are
// all in the log after the snapshot (none is taken), so that the restart is raft reading that
// log when it starts and again when it applies it.
func BenchmarkRestartWithLongLog(b *testing.B) {
	for _, store := range logStores {
		b.Run(store, func(b *testing.B) {
			for range b.N {
				benchRestart(b, store, 100_000, false, func(cfg *cluster.Config) {
					cfg.SnapshotThreshold = math.MaxUint64
				})
			}
		})
	}
}

func benchRestart(b *testing.B, store string, locks int, graceful bool, tune func(*cluster.Config)) {
	b.StopTimer()
	c := newTestCluster(b, 3, func(cfg *cluster.Config) {
		cfg.LogStore = store
		if tune != nil {
			tune(cfg)
		}
	})
	_, leader := c.waitLeader()
	const workers = 64
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		s := createSession(b, leader, fmt.Sprintf("holder-%d", g), time.Hour, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(locks); i = next.Add(1) {
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				res, err := leader.Acquire(ctx, cluster.AcquireRequest{Session: s, Lock: fmt.Sprintf("bench/%d", i)})
				cancel()
				if err == nil && res.Status != fsm.StatusOK {
					err = fmt.Errorf("acquire: status %v", res.Status)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	want := leader.AppliedIndex()
	testkit.Eventually(b, time.Minute, "every node to apply the last grant", func() bool {
		for _, i := range c.running() {
			if c.node(i).AppliedIndex() < want {
				return false
			}
		}
		return true
	})
	var stopping sync.WaitGroup
	for i := range c.ids {
		if graceful {
			stopping.Go(func() { c.stop(i) })
		} else {
			c.kill(i)
		}
	}
	stopping.Wait()
	// A restarted cluster is three new processes: drop the stopped nodes' state, so that the
	// garbage collector does not trace it while the new nodes restore theirs.
	leader = nil
	runtime.GC()
	snapIndex := make([]uint64, len(c.ids))
	for i, dir := range c.dirs {
		if meta := newestSnapshot(b, dir); meta != nil {
			snapIndex[i] = meta.Index
		}
	}

	b.StartTimer()
	start := time.Now()
	c.restartAll()
	opened := time.Since(start)
	li, leader := c.waitLeader()
	led := time.Since(start)
	s := createSession(b, leader, "after-restart", time.Hour, 0)
	mustAcquire(b, leader, s, "after-restart", "")
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(opened.Seconds(), "open-s")
	b.ReportMetric(led.Seconds(), "leader-s")
	// The log the leader replays is what was applied before the stop but not in its snapshot.
	b.ReportMetric(float64(want-min(want, snapIndex[li])), "replayed")
	if got := len(leader.FSM().Locks("bench/")); got != locks {
		b.Fatalf("after the restart the leader holds %d of the %d locks", got, locks)
	}
	b.ReportMetric(elapsed.Seconds(), "restart-s")
}
