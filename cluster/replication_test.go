package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A grant made through the leader is visible at once to a linearizable read on the leader, and
// on each follower as soon as it has applied the grant's index; a follower refuses writes.
func TestLockIsVisibleOnEveryNode(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	li, leader := c.waitLeader()

	testkit.Eventually(t, leaderTimeout, "grant-times enabled", func() bool { return leader.FSM().FeatureEnabled(fsm.FeatureGrantTimes) })
	s1 := createSession(t, leader, "holder", longTTL, 0)
	s2 := createSession(t, leader, "other", longTTL, 0)
	before := time.Now()
	token := mustAcquire(t, leader, s1, "jobs/nightly", "host-a")

	if err := leader.ReadBarrier(opContext(t)); err != nil {
		t.Fatalf("read barrier on the leader: %v", err)
	}
	// The grant's time is the leader's clock when it appended the entry, which every node
	// reads from the log alike.
	since := leader.FSM().Lock("jobs/nightly").Since
	if since < before.UnixNano() || since > time.Now().UnixNano() {
		t.Fatalf("grant time %d is not between the request (%d) and its answer", since, before.UnixNano())
	}
	want := fsm.LockInfo{Name: "jobs/nightly", Held: true, Holder: s1, Token: token, Value: "host-a", ModifyIndex: token, Since: since}
	if got := leader.FSM().Lock("jobs/nightly"); got != want {
		t.Fatalf("leader reads %+v, want %+v", got, want)
	}
	for _, fi := range c.followers(li) {
		// A follower's state machine is a stale copy: it shows the grant once it has applied it.
		f := c.node(fi)
		testkit.Eventually(t, opTimeout, f.ID()+" to apply the grant", func() bool { return f.FSM().Lock("jobs/nightly").ModifyIndex >= token })
		if got := f.FSM().Lock("jobs/nightly"); got != want {
			t.Errorf("%s reads %+v, want %+v", f.ID(), got, want)
		}
		// Only the leader executes writes and linearizable reads; nothing reaches the log.
		if _, err := f.Acquire(opContext(t), cluster.AcquireRequest{Session: s2, Lock: "jobs/nightly"}); !errors.Is(err, cluster.ErrNotLeader) {
			t.Errorf("acquire on follower %s: err %v, want ErrNotLeader", f.ID(), err)
		}
		if err := f.ReadBarrier(opContext(t)); !errors.Is(err, cluster.ErrNotLeader) {
			t.Errorf("read barrier on follower %s: err %v, want ErrNotLeader", f.ID(), err)
		}
		if id, _ := f.Leader(); id != leader.ID() {
			t.Errorf("%s says the leader is %q, want %q", f.ID(), id, leader.ID())
		}
	}

	// Another session sees the holder and its token.
	res, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: s2, Lock: "jobs/nightly"})
	if err != nil || res.Status != fsm.StatusLockHeld || res.Holder != s1 || res.Token != token {
		t.Fatalf("competing acquire: %+v, %v; want lock_held by the holder with token %d", res, err, token)
	}

	// A release is visible the same way.
	rel := mustRelease(t, leader, s1, "jobs/nightly", token)
	if err := leader.ReadBarrier(opContext(t)); err != nil {
		t.Fatal(err)
	}
	if l := leader.FSM().Lock("jobs/nightly"); l.Held {
		t.Fatalf("leader still reads the lock held after release: %+v", l)
	}
	for _, fi := range c.followers(li) {
		f := c.node(fi)
		testkit.Eventually(t, opTimeout, f.ID()+" to apply the release", func() bool { return f.FSM().Lock("jobs/nightly").ModifyIndex >= rel.Index })
		if l := f.FSM().Lock("jobs/nightly"); l.Held {
			t.Errorf("%s still reads the lock held after release: %+v", f.ID(), l)
		}
	}

	// Every node publishes its HTTP address through the log, and every node sees all three.
	c.waitPublished(leader)
	c.waitConverged()
	for _, i := range c.running() {
		st, err := c.node(i).Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader != leader.ID() || len(st.Members) != 3 {
			t.Errorf("%s status: leader %q, %d members; want %q and 3", c.ids[i], st.Leader, len(st.Members), leader.ID())
		}
		for _, m := range st.Members {
			if m.HTTPAddr != c.https[indexOf(c.ids, m.ID)].Listener.Addr().String() || !m.Voter {
				t.Errorf("%s sees member %+v", c.ids[i], m)
			}
		}
	}
}

// Stopping every node and starting them again from their data directories brings back the
// same sessions, locks and queues — byte for byte — and the cluster works on from there.
func TestRestartAllNodesRestoresState(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, testRestartAllNodesRestoresState)
}

func testRestartAllNodesRestoresState(t *testing.T, store string) {
	c := newTestCluster(t, 3, func(cfg *cluster.Config) { cfg.LogStore = store })
	_, leader := c.waitLeader()

	a := createSession(t, leader, "a", longTTL, 0)
	b := createSession(t, leader, "b", longTTL, 5*time.Second)
	w := createSession(t, leader, "waiter", longTTL, 0)
	ta := mustAcquire(t, leader, a, "svc/db", "10.0.0.1:5432")
	tb := mustAcquire(t, leader, b, "svc/cache", "")
	mustAcquire(t, leader, b, "svc/queue", "q")
	queued := enqueue(t, leader, w, "svc/db", 30*time.Second)
	gone := createSession(t, leader, "gone", longTTL, 0)
	mustAcquire(t, leader, gone, "svc/tmp", "")
	if _, err := leader.DestroySession(opContext(t), gone); err != nil {
		t.Fatal(err)
	}

	c.waitPublished(leader)
	snap := c.waitConverged()
	locks, sessions := leader.FSM().Locks(""), leader.FSM().Sessions()
	if len(locks) != 3 || len(sessions) != 3 {
		t.Fatalf("before restart: %d locks, %d sessions; want 3 and 3", len(locks), len(sessions))
	}

	for i := range c.ids {
		c.kill(i)
	}
	// The waiting acquire ends with its node; its queue entry stays in the log.
	if r := receive(t, queued, opTimeout); r.err == nil && r.res.Status == fsm.StatusOK {
		t.Fatalf("waiter was granted while the holder still held the lock: %+v", r.res)
	}
	for i := range c.ids {
		c.restart(i)
	}
	_, leader = c.waitLeader()
	for _, i := range c.running() {
		// Each node replays its own log (the threshold is far away, so there is no snapshot).
		n := c.node(i)
		testkit.Eventually(t, leaderTimeout, n.ID()+" to restore the state from its data dir", func() bool {
			return bytes.Equal(snapshotBytes(t, n), snap)
		})
		if got := n.FSM().Locks(""); !reflect.DeepEqual(got, locks) {
			t.Errorf("%s after restart: locks %+v, want %+v", n.ID(), got, locks)
		}
		if got := n.FSM().Sessions(); !reflect.DeepEqual(got, sessions) {
			t.Errorf("%s after restart: sessions %+v, want %+v", n.ID(), got, sessions)
		}
	}

	// The restored queue is honoured: the release hands the lock to the waiter queued before
	// the restart, whose acquire (asked again, as a client would) reports the grant.
	mustRelease(t, leader, a, "svc/db", ta)
	l := leader.FSM().Lock("svc/db")
	if !l.Held || l.Holder != w || l.Token <= max(ta, tb) {
		t.Fatalf("after release: %+v; want held by the waiter with a token above %d", l, max(ta, tb))
	}
	if got := mustAcquire(t, leader, w, "svc/db", ""); got != l.Token {
		t.Fatalf("the waiter's acquire reports token %d, want %d", got, l.Token)
	}
}

// A graceful shutdown snapshots what was applied, so a node starts with its whole state restored
// before it hears from any leader, instead of replaying its log once one is elected.
func TestGracefulShutdownSnapshotsTheAppliedState(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()
	s := createSession(t, leader, "a", longTTL, 0)
	for i := range 20 {
		mustAcquire(t, leader, s, fmt.Sprintf("svc/%d", i), "")
	}
	c.waitPublished(leader)
	snap := c.waitConverged()
	applied := leader.AppliedIndex()

	var wg sync.WaitGroup
	for i := range c.ids {
		wg.Go(func() { c.stop(i) })
	}
	wg.Wait()
	c.restartAll()
	for _, i := range c.running() {
		// The snapshot threshold is far away: without the shutdown snapshot, the state machine
		// would be empty until a leader tells this node what is committed.
		n := c.node(i)
		if got := snapshotBytes(t, n); !bytes.Equal(got, snap) {
			t.Errorf("%s: the state right after start differs from the state before shutdown", n.ID())
		}
		if got := n.AppliedIndex(); got < applied {
			t.Errorf("%s: applied index %d right after start, want at least %d", n.ID(), got, applied)
		}
	}
	_, leader = c.waitLeader()
	mustAcquire(t, leader, s, "svc/after", "")
}

// A follower that was down while the leader compacted its log away catches up by installing
// the leader's snapshot, and ends with the same state as everyone else.
func TestLaggingFollowerCatchesUpThroughSnapshot(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, testLaggingFollowerCatchesUpThroughSnapshot)
}

func testLaggingFollowerCatchesUpThroughSnapshot(t *testing.T, store string) {
	const trailing = 32
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		cfg.LogStore = store
		cfg.WALSegmentSize = 4096 // wal compacts whole segments: keep them small
		cfg.SnapshotThreshold = 64
		cfg.TrailingLogs = trailing
		cfg.SnapshotInterval = 50 * time.Millisecond
	})
	li, leader := c.waitLeader()
	c.waitPublished(leader)
	c.waitConverged()
	lag := c.followers(li)[0]
	lagDir := c.dirs[lag]
	// The follower may have a snapshot of its own already (every node takes one when features
	// are enabled), at or below stoppedAt: only one past it proves an installed snapshot.
	stoppedAt := c.node(lag).Raft().LastIndex()
	c.kill(lag)

	// A few hundred commands, from several goroutines so that raft batches their fsyncs.
	keep := createSession(t, leader, "keeper", longTTL, 0)
	const workers, rounds = 6, 30
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- churn(c, g, rounds)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	_, leader = c.waitLeader()
	mustAcquire(t, leader, keep, "kept", "still here")

	// The leader must have dropped the entries the follower lacks, or the test proves nothing:
	// after a snapshot at index s, raft keeps the log from about s-trailing on.
	testkit.Eventually(t, leaderTimeout, "the leader to compact its log", func() bool {
		return raftStat(t, leader, "last_snapshot_index") > stoppedAt+trailing+1
	})

	c.restart(lag)
	f := c.node(lag)
	// The restarted node is among those that must reach byte-identical states.
	c.waitConverged()
	// A snapshot past the end of its own log can only have come from the leader.
	if s := raftStat(t, f, "last_snapshot_index"); s <= stoppedAt {
		t.Fatalf("follower's last snapshot is at %d and its log ended at %d: it did not install one", s, stoppedAt)
	}
	entries, err := os.ReadDir(filepath.Join(lagDir, "snapshots"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("no snapshot in the follower's data dir: %v, %d entries", err, len(entries))
	}
	if l := f.FSM().Lock("kept"); !l.Held || l.Holder != keep || l.Value != "still here" {
		t.Fatalf("follower reads %+v for the lock taken while it was down", l)
	}
}

// churn applies about 4 commands per round through whichever node leads: a session, a grant,
// a release and an end. It is load, not a check, so it retries through leader changes.
func churn(c *testCluster, worker, rounds int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := "churn/" + string(rune('a'+worker))
	for i := 0; i < rounds; {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		n := c.currentLeader()
		if n == nil {
			time.Sleep(10 * time.Millisecond) // polling for a leader
			continue
		}
		s, err := n.CreateSession(ctx, name, longTTL, 0)
		if err != nil {
			continue
		}
		res, err := n.Acquire(ctx, cluster.AcquireRequest{Session: s.ID, Lock: name})
		if err == nil && res.Status == fsm.StatusOK && i%2 == 0 {
			_, err = n.Release(ctx, s.ID, name, res.Token, cluster.Attempt{})
		}
		if _, err2 := n.DestroySession(ctx, s.ID); err == nil && err2 == nil {
			i++
		}
	}
	return nil
}

// An advertised Raft address that is a host name is kept as given, not resolved once at
// start: the members store and dial the name, so a node whose name comes to point at another
// IP address (a Kubernetes pod recreated behind its Service) is still reached.
func TestAdvertisedHostNamesAreKeptAsGiven(t *testing.T) {
	byName := func(addr string) string {
		_, port, _ := net.SplitHostPort(addr)
		return net.JoinHostPort("localhost", port)
	}
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		initial := map[string]string{}
		for id, addr := range cfg.InitialCluster {
			initial[id] = byName(addr)
		}
		cfg.InitialCluster = initial
		cfg.AdvertiseRaft = initial[cfg.ID]
	})
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	ms, err := leader.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if host, _, _ := net.SplitHostPort(m.RaftAddr); host != "localhost" {
			t.Fatalf("member %s stored at %q, want the advertised name", m.ID, m.RaftAddr)
		}
	}
	s := createSession(t, leader, "a", longTTL, 0)
	mustAcquire(t, leader, s, "l", "")
	c.waitConverged()
}

// Grant and queue times come from the log: every node reads the same ones, and a node that
// replays its log after a crash (no snapshot) reads them again, with either log store.
func TestGrantTimesAreTheSameOnEveryNodeAndAfterReplay(t *testing.T) {
	t.Parallel()
	forEachLogStore(t, func(t *testing.T, store string) {
		c := newTestCluster(t, 3, func(cfg *cluster.Config) { cfg.LogStore = store })
		_, leader := c.waitLeader()
		testkit.Eventually(t, leaderTimeout, "grant-times enabled", func() bool { return leader.FSM().FeatureEnabled(fsm.FeatureGrantTimes) })
		a := createSession(t, leader, "a", longTTL, 0)
		b := createSession(t, leader, "b", longTTL, 0)
		mustAcquire(t, leader, a, "svc/x", "")
		waiting := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*opTimeout)
			defer cancel()
			_, err := leader.Acquire(ctx, cluster.AcquireRequest{Session: b, Lock: "svc/x", Wait: opTimeout})
			waiting <- err
		}()
		testkit.Eventually(t, opTimeout, "b to queue", func() bool { return leader.FSM().Lock("svc/x").Waiters == 1 })
		want := leader.FSM().LockView("svc/x")
		if want.Since == 0 || len(want.Queue) != 1 || want.Queue[0].Since < want.Since {
			t.Fatalf("the leader reads %+v, want a grant time and a later queue time", want)
		}
		c.waitPublished(leader)
		c.waitConverged() // byte-identical snapshots, times included
		for _, i := range c.running() {
			if got := c.node(i).FSM().LockView("svc/x"); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s reads %+v, want %+v", c.ids[i], got, want)
			}
		}
		for _, i := range c.running() {
			c.kill(i)
		}
		<-waiting // its node is gone; the wait stays in the log
		c.restartAll()
		_, leader = c.waitLeader()
		c.waitConverged()
		for _, i := range c.running() {
			got := c.node(i).FSM().LockView("svc/x")
			if got.Since != want.Since || len(got.Queue) != 1 || got.Queue[0].Since != want.Queue[0].Since {
				t.Fatalf("%s after replay reads %+v, want the times of %+v", c.ids[i], got, want)
			}
		}
	})
}
