package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/bench"
	"github.com/raftlock/raftlock/config"
)

// TestRunOverTLS measures a cluster that requires client certificates, through Options.TLS
// (the workload scrapes the servers' /metrics too, over the same TLS).
func TestRunOverTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, Tune: func(c *config.Config) { c.TLSVerifyClients = true }})
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	defer dev.Close()
	files, _ := dev.TLSFiles()
	cfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.Run(ctx, bench.Options{
		Endpoints:          dev.Endpoints(),
		TLS:                cfg,
		Dev:                dev,
		Workloads:          []string{bench.Uncontended},
		UncontendedClients: []int{2},
		Duration:           500 * time.Millisecond,
		Warmup:             100 * time.Millisecond,
		Via:                bench.ViaFollower,
		Version:            "test",
	})
	if err != nil {
		t.Fatalf("Run over TLS: %v", err)
	}
	if !strings.HasPrefix(rep.Environment.Endpoints[0], "https://") {
		t.Fatalf("endpoints %v", rep.Environment.Endpoints)
	}
	if len(rep.Uncontended) != 1 {
		t.Fatalf("uncontended results: %d, want 1", len(rep.Uncontended))
	}
	u := rep.Uncontended[0]
	if u.Ops <= 0 || len(u.Violations) > 0 {
		t.Fatalf("uncontended over TLS: %+v", u)
	}
	// The servers' CPU comes from their /metrics, read over the same TLS.
	if u.ServerCPUMicros == nil || *u.ServerCPUMicros <= 0 {
		t.Fatalf("no server CPU per op over TLS: %v", u.ServerCPUMicros)
	}
}
