package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// nextLeader waits for the next observation, failing the test after a while.
func nextLeader(t *testing.T, obs <-chan api.Lock) api.Lock {
	t.Helper()
	select {
	case l, ok := <-obs:
		if !ok {
			t.Fatal("Observe channel closed")
		}
		return l
	case <-time.After(15 * time.Second):
		t.Fatal("no leader change observed")
	}
	return api.Lock{}
}

func TestElectionSurvivesLeaderNodeCrashAndObserveFollows(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := ownCluster(t)
		ctx := testCtx(t, 45*time.Second)
		name := lockName(t, "e")
		c := tr.client(t, dev)
		e1 := client.NewElection(newSession(t, c, client.WithTTL(5*time.Second)), name)
		e2 := client.NewElection(newSession(t, c, client.WithTTL(5*time.Second)), name)

		if _, err := e1.Leader(ctx); !errors.Is(err, client.ErrElectionNoLeader) {
			t.Fatalf("Leader before any campaign: %v", err)
		}
		observer := tr.client(t, dev)
		obs := observer.Observe(ctx, name)
		if l := nextLeader(t, obs); l.Held {
			t.Fatalf("observed %+v before any campaign, want a vacancy", l)
		}

		if err := e1.Campaign(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		if l := nextLeader(t, obs); l.Value != "one" || l.Token != e1.Token() {
			t.Fatalf("observed %+v, want value one with token %d", l, e1.Token())
		}
		campaign2 := make(chan error, 1)
		go func() { campaign2 <- e2.Campaign(ctx, "two") }()
		waitWaiters(ctx, t, c, name, 1)

		// Crash the Raft leader node. The election, its leader and the queued candidate survive.
		crashLeader(ctx, t, dev)
		l, err := e2.Leader(ctx)
		if err != nil || l.Value != "one" || l.Token != e1.Token() {
			t.Fatalf("Leader after the crash: %+v, %v", l, err)
		}
		if !e1.IsLeader() || e1.Context().Err() != nil {
			t.Fatal("the elected leader lost its leadership in the crash")
		}
		if err := e1.Proclaim(ctx, "one-b"); err != nil {
			t.Fatalf("Proclaim: %v", err)
		}
		if l := nextLeader(t, obs); l.Value != "one-b" || l.Token != e1.Token() {
			t.Fatalf("observed %+v after Proclaim, want one-b with the same token", l)
		}
		if err := e2.Proclaim(ctx, "usurper"); !errors.Is(err, client.ErrNotLeader) {
			t.Fatalf("Proclaim by a candidate: %v, want ErrNotLeader", err)
		}

		oldToken := e1.Token()
		if err := e1.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-campaign2; err != nil {
			t.Fatalf("second campaign: %v", err)
		}
		// The lock goes to the waiting candidate in the release, or, if the crash cut its wait
		// short and it asked again, a little after a vacancy.
		l2 := nextLeader(t, obs)
		if !l2.Held {
			l2 = nextLeader(t, obs)
		}
		if l2.Value != "two" || l2.Token != e2.Token() || l2.Token <= oldToken {
			t.Fatalf("observed %+v, want two with token %d > %d", l2, e2.Token(), oldToken)
		}
		if e1.IsLeader() || e1.Context().Err() == nil {
			t.Fatal("resigned leader still believes it leads")
		}
	})
}

// A proclamation whose request is delayed past the end of the leadership must not elect this
// candidate anew when it arrives: Proclaim cancelled its attempt when it gave up.
func TestProclamationDelayedPastResignDoesNotElect(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 30*time.Second)
		name := lockName(t, "e")
		p, lc := tr.holding(t, dev)
		e := client.NewElection(newSession(t, lc, client.WithTTL(time.Minute)), name)
		if err := e.Campaign(ctx, "one"); err != nil {
			t.Fatal(err)
		}
		giveUpWhileHeld(ctx, t, p, func(ctx context.Context) error { return e.Proclaim(ctx, "two") })
		if err := e.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		deliverLate(ctx, t, p)
		if l, err := c.GetLock(ctx, name); err != nil || l.Held {
			t.Fatalf("after the late proclamation, lock %+v (%v): want nobody elected", l, err)
		}
	})
}

// Observe reports a vacancy (no leader) as well as each new leader: when the leader resigns
// with nobody waiting, and when its session is lost; a handoff to a waiting candidate is a
// new leader, with no vacancy between.
func TestObserveReportsVacancies(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 45*time.Second)
	c := newClient(t, dev.Endpoints())
	name := lockName(t, "e")
	obs := c.Observe(ctx, name)
	if l := nextLeader(t, obs); l.Held {
		t.Fatalf("first observation %+v: want a vacancy", l)
	}
	e1 := client.NewElection(newSession(t, c), name)
	if err := e1.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(t, obs); !l.Held || l.Token != e1.Token() {
		t.Fatalf("observed %+v, want the leader under %d", l, e1.Token())
	}
	if err := e1.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(t, obs); l.Held || l.Name != name {
		t.Fatalf("observed %+v after the leader resigned, want a vacancy", l)
	}
	s2 := newSession(t, c)
	e2 := client.NewElection(s2, name)
	if err := e2.Campaign(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	e3 := client.NewElection(newSession(t, c), name)
	campaign3 := make(chan error, 1)
	go func() { campaign3 <- e3.Campaign(ctx, "three") }()
	if l := nextLeader(t, obs); !l.Held || l.Value != "two" {
		t.Fatalf("observed %+v, want two", l)
	}
	waitWaiters(ctx, t, c, name, 1)
	if err := s2.Close(ctx); err != nil { // the leader's session ends: the lock goes to e3 at once
		t.Fatal(err)
	}
	if err := <-campaign3; err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(t, obs); !l.Held || l.Value != "three" || l.Token != e3.Token() {
		t.Fatalf("observed %+v, want three with no vacancy before", l)
	}
	if err := e3.Session().Close(ctx); err != nil {
		t.Fatal(err)
	}
	if l := nextLeader(t, obs); l.Held {
		t.Fatalf("observed %+v after the leader's session ended, want a vacancy", l)
	}
}
