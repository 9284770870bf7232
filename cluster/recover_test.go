package cluster_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A cluster that lost two of its three nodes for good starts again from the third: recover
// rewrites its configuration to itself alone, and it elects itself, serves the locks it had,
// and issues tokens past its old log by the gap.
func TestRecoverRestartsASurvivorAlone(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li, leader := c.waitLeader()
	c.waitPublished(leader)
	s := createSession(t, leader, "holder", longTTL, 0)
	tok := mustAcquire(t, leader, s, "jobs/kept", "v")
	c.waitConverged()
	last := leader.Raft().LastIndex()
	survivor := c.followers(li)[0]
	for _, i := range c.running() {
		c.kill(i)
	}
	if _, err := cluster.Recover(c.dirs[survivor], nil, 0, nil); err == nil {
		t.Fatal("recover without members succeeded")
	}
	const gap = 100
	res, err := cluster.Recover(c.dirs[survivor], map[string]string{c.ids[survivor]: c.addrs[survivor]}, gap, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Index < last+gap || res.Stats.Held != 1 {
		t.Fatalf("recovered %+v, want index at least %d and one held lock", res, last+gap)
	}
	recovered := time.Now()
	c.restart(survivor)
	_, leader = c.waitLeader()
	if leader.ID() != c.ids[survivor] {
		t.Fatalf("leader %s, want the survivor %s", leader.ID(), c.ids[survivor])
	}
	// Its metrics say when it was recovered (an operator alerts on it; the count of restarts
	// alone would not tell).
	if at := gatherValue(t, leader, "raftlock_recovery_last_timestamp_seconds"); at < float64(recovered.Unix()-60) || at > float64(recovered.Unix()+1) {
		t.Errorf("raftlock_recovery_last_timestamp_seconds = %v after a recovery at %v", at, recovered.Unix())
	}
	if l := leader.FSM().Lock("jobs/kept"); !l.Held || l.Holder != s || l.Token != tok {
		t.Fatalf("recovered lock %+v", l)
	}
	next := mustAcquire(t, leader, s, "jobs/new", "")
	if next <= res.Index {
		t.Fatalf("token after recovery %d, not past the recovered index %d", next, res.Index)
	}
	ms, err := leader.Members()
	if err != nil || len(ms) != 1 {
		t.Fatalf("members after recovery %+v, %v", ms, err)
	}
	// The lost members' addresses are forgotten once the survivor leads.
	testkit.Eventually(t, leaderTimeout, "the lost members' metadata to go", func() bool { return len(leader.FSM().Members()) == 1 })
}

// Recover refuses a directory that holds no Raft state.
func TestRecoverRefusesAnEmptyDir(t *testing.T) {
	_, err := cluster.Recover(t.TempDir(), map[string]string{"n1": "127.0.0.1:1"}, 0, nil)
	if err == nil || errors.Is(err, cluster.ErrDataDirInUse) {
		t.Fatalf("recover of an empty dir: %v", err)
	}
}

// A recovery whose gap would take the log index to within 2^62 of the top of uint64, or past
// it (where the sum wraps and the next token would go below earlier ones), is refused and
// changes nothing: the node starts as before, with its lock and its tokens.
func TestRecoverRefusesAGapNearTheTopOfUint64(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	_, leader := c.waitLeader()
	s := createSession(t, leader, "holder", longTTL, 0)
	tok := mustAcquire(t, leader, s, "jobs/kept", "")
	c.kill(0)
	members := map[string]string{c.ids[0]: c.addrs[0]}
	for _, gap := range []uint64{18446744073709551606, math.MaxUint64 - cluster.IndexHeadroom} {
		if _, err := cluster.Recover(c.dirs[0], members, gap, nil); !errors.Is(err, cluster.ErrNoIndexHeadroom) {
			t.Fatalf("recover with a gap of %d: %v, want ErrNoIndexHeadroom", gap, err)
		}
	}
	c.restart(0)
	_, leader = c.waitLeader()
	if l := leader.FSM().Lock("jobs/kept"); !l.Held || l.Token != tok {
		t.Fatalf("lock after the refused recoveries %+v", l)
	}
	if next := mustAcquire(t, leader, s, "jobs/next", ""); next <= tok {
		t.Fatalf("token after the refused recoveries %d, not above %d", next, tok)
	}
}

// gather returns the metric families that the node's Collector reports now.
func gather(t *testing.T, n *cluster.Node) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// gatherValue returns the value of the metric name (one series, counter or gauge) that the
// node's Collector reports now.
func gatherValue(t *testing.T, n *cluster.Node, name string) float64 {
	t.Helper()
	for _, f := range gather(t, n) {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			m := f.GetMetric()[0]
			return m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	t.Fatalf("the node's metrics have no single series %s", name)
	return 0
}

// gatherSeries returns the value of the series of the metric name whose label has value.
func gatherSeries(t *testing.T, n *cluster.Node, name, label, value string) float64 {
	t.Helper()
	for _, f := range gather(t, n) {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("the node's metrics have no series %s{%s=%q}", name, label, value)
	return 0
}
