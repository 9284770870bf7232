package embed_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/embed"
)

// gathered returns the value of each metric family of r by name (a family's first sample).
func gathered(t *testing.T, r *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := r.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		m := f.GetMetric()[0]
		switch {
		case m.GetGauge() != nil:
			out[f.GetName()] = m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			out[f.GetName()] = m.GetCounter().GetValue()
		default:
			out[f.GetName()] = -1 // a histogram or summary: present
		}
	}
	return out
}

// Config.Metrics puts the node's raftlock_* metrics in the service's own registry beside its
// Go metrics (which the node does not register again), live; a second node in the same
// registry is refused (each node of a registry needs its label); Close takes them out.
func TestMetricsInTheServicesRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector()) // the service's own
	g := startGroup(t, 1, func(_ int, c *embed.Config) { c.Metrics = reg })
	g.leader()
	ctx := testCtx(t)
	s, err := g.nodes[0].Client().NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := client.NewMutex(s, "metrics/x").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	got := gathered(t, reg)
	if got["raftlock_raft_leader"] != 1 || got["raftlock_grants_total"] < 1 || got["raftlock_locks_held"] < 1 {
		t.Fatalf("the service's registry after a grant: leader %v, grants %v, held %v",
			got["raftlock_raft_leader"], got["raftlock_grants_total"], got["raftlock_locks_held"])
	}
	if _, ok := got["go_goroutines"]; !ok {
		t.Fatal("the service's own Go metrics are gone")
	}

	// Another node in the same registry collides, and is refused at Start, changing nothing.
	lone := func(metrics prometheus.Registerer) embed.Config {
		addr := freeAddr(t)
		return embed.Config{ID: "m1", DataDir: t.TempDir(), RaftAddr: addr, Peers: map[string]string{"m1": addr}, Metrics: metrics}
	}
	cfg := lone(reg)
	if n, err := embed.Start(ctx, cfg); err == nil || !strings.Contains(err.Error(), "metrics") {
		if n != nil {
			n.Close(context.Background())
		}
		t.Fatalf("a second node in the same registry: %v, want a refusal naming the metrics", err)
	}
	if got := gathered(t, reg); got["raftlock_raft_leader"] != 1 {
		t.Fatal("the refused node's Start took the first node's metrics out")
	}
	// Labelled, each node of a registry its own, two fit.
	two := prometheus.NewRegistry()
	for _, id := range []string{"a", "b"} {
		n, err := embed.Start(ctx, lone(prometheus.WrapRegistererWith(prometheus.Labels{"node": id}, two)))
		if err != nil {
			t.Fatalf("node %s under its own label: %v", id, err)
		}
		defer n.Close(context.Background())
	}

	if err := g.nodes[0].Close(ctx); err != nil {
		t.Logf("closing: %v", err)
	}
	for name := range gathered(t, reg) {
		if strings.HasPrefix(name, "raftlock_") {
			t.Fatalf("%s still in the service's registry after Close", name)
		}
	}
}
