package jepsen

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
)

// A leader change that no nemesis caused is recorded as a LeaderChange event spanning it: here
// the leader is killed behind the harness's back, and the event must cover the kill.
func TestWatchElectionsRecordsAnUnplannedLeaderChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, cluster.Options{Binary: buildBinary(t, ctx), Dir: t.TempDir(), Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := history.NewRecorder(io.Discard)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); watchElections(ctx, stop, c, rec) }()
	leader, err := c.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Let the watcher see the settled leader before it goes.
	testkit.Eventually(t, 10*time.Second, "a poll of the settled leader", func() bool { return rec.Now() > int64(3*electionPoll) })
	if err := leader.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	killed := rec.Now() // the leader is gone by now: no later poll can have seen it
	if _, err := c.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	elected := rec.Now()
	testkit.Eventually(t, 10*time.Second, "the leader change to be recorded", func() bool {
		return len(history.Faults(rec.Ops())) > 0
	})
	close(stop)
	<-done
	faults := history.Faults(rec.Ops())
	if len(faults) != 1 || faults[0].Fault != LeaderChange {
		t.Fatalf("recorded %+v, want one %s", faults, LeaderChange)
	}
	if f := faults[0]; f.Start > killed || f.End < elected-int64(2*electionPoll) {
		t.Errorf("the event spans [%d, %d] ns, which misses the kill (done at %d) or the election by %d", f.Start, f.End, killed, elected)
	}
}
