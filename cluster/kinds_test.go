package cluster_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// kindsCluster starts a cluster and waits until it has enabled semaphores-rwlocks.
func kindsCluster(t *testing.T, size int) (*testCluster, *cluster.Node) {
	t.Helper()
	c := newTestCluster(t, size, nil)
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	testkit.Eventually(t, leaderTimeout, "semaphores-rwlocks enabled", func() bool {
		n := c.currentLeader()
		return n != nil && n.FeatureEnabled(fsm.FeatureSemaphoresRWLocks)
	})
	_, leader = c.waitLeader()
	return c, leader
}

// waitShared queues session for a shared hold of lock, waiting up to wait.
func waitShared(n *cluster.Node, session fsm.SessionID, lock string, wait time.Duration) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait+opTimeout)
		defer cancel()
		res, err := n.Acquire(ctx, cluster.AcquireRequest{Session: session, Lock: lock, Wait: wait, Shared: true})
		ch <- acquireResult{res, err, time.Now()}
	}()
	return ch
}

// When a writer lets go of a lock that readers wait for, every waiting reader is granted
// (the first in the release's command, the others by the ServeQueue commands the leader
// proposes), each under a token of its own, while the later writer keeps waiting.
func TestReleasedWriterHandsTheLockToEveryWaitingReader(t *testing.T) {
	c, leader := kindsCluster(t, 3)
	writer := createSession(t, leader, "w", longTTL, 0)
	wtoken := mustAcquire(t, leader, writer, "rw", "")
	var readers []<-chan acquireResult
	for i := range 4 {
		r := createSession(t, leader, "r", longTTL, 0)
		readers = append(readers, waitShared(leader, r, "rw", 30*time.Second))
		testkit.Eventually(t, opTimeout, "reader queued", func() bool { return leader.FSM().Lock("rw").Waiters == i+1 })
	}
	late := createSession(t, leader, "late writer", longTTL, 0)
	lateCh := enqueue(t, leader, late, "rw", 30*time.Second)
	mustRelease(t, leader, writer, "rw", wtoken)
	seen := map[uint64]bool{}
	for _, ch := range readers {
		got := receive(t, ch, opTimeout)
		if got.err != nil || got.res.Status != fsm.StatusOK || got.res.Token <= wtoken || seen[got.res.Token] {
			t.Fatalf("reader: %+v, %v (tokens so far %v)", got.res, got.err, seen)
		}
		seen[got.res.Token] = true
	}
	notYet(t, lateCh, "the writer after the readers")
	if hs := leader.FSM().Holders("rw"); len(hs) != 4 || !hs[0].Shared {
		t.Fatalf("holders %+v", hs)
	}
	c.waitConverged()
}

// A semaphore lets N sessions hold it at once; an expiry holds its permit back for the
// session's lock-delay, and the leader ends each delay after its own length, granting the
// waiter then.
func TestSemaphorePermitsAndDelays(t *testing.T) {
	_, leader := kindsCluster(t, 3)
	acquire := func(s fsm.SessionID, wait time.Duration) (fsm.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait+opTimeout)
		defer cancel()
		return leader.Acquire(ctx, cluster.AcquireRequest{Session: s, Lock: "sem", Limit: 2, Wait: wait})
	}
	short := createSession(t, leader, "short", 2*time.Second, time.Second)
	long := createSession(t, leader, "long", longTTL, 0)
	for _, s := range []fsm.SessionID{short, long} {
		if res, err := acquire(s, 0); err != nil || res.Status != fsm.StatusOK {
			t.Fatalf("permit: %+v, %v", res, err)
		}
	}
	third := createSession(t, leader, "third", longTTL, 0)
	if res, err := acquire(third, 0); err != nil || res.Status != fsm.StatusLockHeld {
		t.Fatalf("third permit: %+v, %v", res, err)
	}
	if res, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: third, Lock: "sem", Limit: 3}); err != nil || res.Status != fsm.StatusLimitMismatch || res.Limit != 2 {
		t.Fatalf("another limit: %+v, %v", res, err)
	}
	start := time.Now()
	ch := make(chan acquireResult, 1)
	go func() {
		res, err := acquire(third, 20*time.Second)
		ch <- acquireResult{res, err, time.Now()}
	}()
	got := receive(t, ch, 20*time.Second)
	// The short session expires after its TTL (2s), and its permit is held back a second more.
	if got.err != nil || got.res.Status != fsm.StatusOK {
		t.Fatalf("waiter: %+v, %v", got.res, got.err)
	}
	if took := time.Since(start); took < 2*time.Second+time.Second-200*time.Millisecond {
		t.Fatalf("waiter granted after %v, before the expiry and its delay", took)
	}
	if hs := leader.FSM().Holders("sem"); len(hs) != 2 || hs[0].Session != long || hs[1].Session != third {
		t.Fatalf("holders %+v", hs)
	}
}

// While one member lacks semaphores-rwlocks (an older version), the cluster does not enable
// it: a limit or a shared hold is refused before anything is proposed, and that member goes on
// applying the log; after its upgrade, both work.
func TestKindsWaitForEveryMember(t *testing.T) {
	var mu sync.Mutex
	older := map[string]bool{"n2": true}
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		mu.Lock()
		defer mu.Unlock()
		if older[cfg.ID] {
			cfg.Features = slices.DeleteFunc(fsm.AllFeatures(), func(f fsm.Feature) bool { return f == fsm.FeatureSemaphoresRWLocks })
		}
	})
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	testkit.Eventually(t, leaderTimeout, "the shared features enabled", func() bool {
		n := c.currentLeader()
		return n != nil && n.FeatureEnabled(fsm.FeatureAttemptNumbers)
	})
	_, leader = c.waitLeader()
	s := createSession(t, leader, "s", longTTL, 0)
	for _, req := range []cluster.AcquireRequest{
		{Session: s, Lock: "k", Limit: 2},
		{Session: s, Lock: "k", Shared: true},
		{Session: s, Lock: "k", Shared: true, Wait: time.Second},
	} {
		if _, err := leader.Acquire(opContext(t), req); !errors.Is(err, cluster.ErrFeatureNotEnabled) {
			t.Fatalf("%+v before the upgrade: %v, want ErrFeatureNotEnabled", req, err)
		}
	}
	if l := leader.FSM().Lock("k"); l.Held || l.Waiters != 0 {
		t.Fatalf("a refused acquire left %+v", l)
	}
	token := mustAcquire(t, leader, s, "k", "") // a plain lock still works
	mustRelease(t, leader, s, "k", token)
	c.waitConverged() // n2 applied everything, and stopped on nothing

	c.stop(1)
	mu.Lock()
	older["n2"] = false
	mu.Unlock()
	c.restart(1)
	testkit.Eventually(t, leaderTimeout, "semaphores-rwlocks enabled after the upgrade", func() bool {
		n := c.currentLeader()
		return n != nil && n.FeatureEnabled(fsm.FeatureSemaphoresRWLocks)
	})
	_, leader = c.waitLeader()
	res, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "k", Limit: 2})
	if err != nil || res.Status != fsm.StatusOK {
		t.Fatalf("semaphore after the upgrade: %+v, %v", res, err)
	}
	c.waitConverged()
}

// Each of a semaphore's lock-delays ends after its own length: of two permits held back at once,
// by delays of different lengths, the shorter comes back while the longer is still held back.
func TestSemaphoreDelaysEndOneByOne(t *testing.T) {
	_, leader := kindsCluster(t, 1)
	for _, delay := range []time.Duration{time.Second, 5 * time.Second} {
		s := createSession(t, leader, "expiring", 2*time.Second, delay)
		res, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "sem", Limit: 2})
		if err != nil || res.Status != fsm.StatusOK {
			t.Fatalf("permit: %+v, %v", res, err)
		}
	}
	granted := make(chan acquireResult, 2) // both waiters answer here
	for range 2 {
		w := createSession(t, leader, "waiter", longTTL, 0)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := leader.Acquire(ctx, cluster.AcquireRequest{Session: w, Lock: "sem", Limit: 2, Wait: 20 * time.Second})
			granted <- acquireResult{res, err, time.Now()}
		}()
	}
	testkit.Eventually(t, opTimeout, "both sessions expired into delays", func() bool { return len(leader.FSM().DelayedLocks()) == 2 })
	for i := range 2 {
		if got := receive(t, granted, 20*time.Second); got.err != nil || got.res.Status != fsm.StatusOK {
			t.Fatalf("waiter: %+v, %v", got.res, got.err)
		}
		if d := leader.FSM().DelayedLocks(); i == 0 && (len(d) != 1 || d[0].Length != 5*time.Second) {
			t.Fatalf("after the first permit came back, delays %+v, want the longer one only", d)
		}
	}
}
