package cluster_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metrics "github.com/hashicorp/go-metrics/compat"
	"github.com/raftlock/raftlock/cluster"
)

func TestZZProbe(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip()
	}
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	metrics.NewGlobal(metrics.DefaultConfig("p"), sink)
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		cfg.HeartbeatTimeout = 500 * time.Millisecond
		cfg.ElectionTimeout = 500 * time.Millisecond
		cfg.LeaderLeaseTimeout = 500 * time.Millisecond
	})
	_, leader := c.waitLeader()
	time.Sleep(time.Second)
	const clients = 64
	var ops atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range clients {
		s := createSession(t, leader, "p", 30*time.Second, 0)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := fmt.Sprintf("l%d", i)
			for ctx.Err() == nil {
				res, err := leader.Acquire(ctx, cluster.AcquireRequest{Session: s, Lock: lock})
				if err != nil {
					return
				}
				if _, err := leader.Release(ctx, s, lock, res.Token); err != nil {
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	t.Logf("ops/s %.0f", float64(ops.Load())/4)
	data := sink.Data()
	for _, iv := range data {
		var keys []string
		for k := range iv.Samples {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			s := iv.Samples[k]
			t.Logf("%-70s n=%7d mean=%8.3f max=%8.3f", k, s.Count, s.Sum/float64(s.Count), s.Max)
		}
	}
}
