package cluster_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A cluster enables a feature only once every member supports it: while one member runs "an
// older version" (a node that lacks the feature), nothing that needs it is proposed, and the
// member never meets an entry it cannot apply (it would stop). Once that member is upgraded
// (restarted with the feature), the leader enables it, and requests that need it work.
func TestFeatureEnabledOnlyOnceEveryMemberSupportsIt(t *testing.T) {
	var mu sync.Mutex
	older := map[string]bool{"n3": true} // n3 lacks attempt numbers until upgraded
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		mu.Lock()
		defer mu.Unlock()
		if older[cfg.ID] {
			cfg.Features = slices.DeleteFunc(fsm.AllFeatures(), func(f fsm.Feature) bool { return f == fsm.FeatureAttemptNumbers })
		}
	})
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	// The features all members share are enabled; the one n3 lacks is not.
	testkit.Eventually(t, leaderTimeout, "the shared features enabled", func() bool {
		n := c.currentLeader()
		return n != nil && n.FeatureEnabled(fsm.FeatureExpiryTerm) && n.FeatureEnabled(fsm.FeatureTokenDeleteDropsWaits)
	})
	// Each step below runs at whichever node leads, again if a leadership change (a loaded
	// machine changes leaders on its own) refused it or left its outcome unknown; repeating
	// any of them changes nothing the test checks.
	if n := c.currentLeader(); n != nil && n.FeatureEnabled(fsm.FeatureAttemptNumbers) {
		t.Fatal("attempt-numbers enabled while n3 lacks it")
	}
	var s fsm.SessionID
	c.atLeader("create a session", func(n *cluster.Node) error {
		info, err := n.CreateSession(opContext(t), "w", longTTL, 0)
		s = info.ID
		return err
	})
	c.atLeader("a numbered acquire before the upgrade", func(n *cluster.Node) error {
		_, err := n.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "l", Attempt: cluster.Attempt{Seq: 1}})
		switch {
		case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrUnknownOutcome):
			return err // leadership moved: ask the next leader
		case !errors.Is(err, cluster.ErrFeatureNotEnabled):
			t.Fatalf("numbered acquire before the upgrade: %v, want ErrFeatureNotEnabled", err)
		}
		return nil
	})
	// The leader reports what each member said of itself.
	c.atLeader("the members' reports", func(n *cluster.Node) error {
		members, err := n.Members()
		if err != nil {
			return err
		}
		for _, m := range members {
			if m.Report == nil {
				return fmt.Errorf("%w: no report of %s yet", cluster.ErrNotLeader, m.ID) // a new leader asks again
			}
			if m.ID == "n3" == slices.Contains(m.Report.Features, fsm.FeatureAttemptNumbers) {
				t.Fatalf("member %s report %+v", m.ID, m.Report)
			}
		}
		return nil
	})

	// Upgrade n3: stop it, start it again with every feature.
	c.stop(2)
	mu.Lock()
	older["n3"] = false
	mu.Unlock()
	c.restart(2)
	testkit.Eventually(t, leaderTimeout, "attempt-numbers enabled after the upgrade", func() bool {
		n := c.currentLeader()
		return n != nil && n.FeatureEnabled(fsm.FeatureAttemptNumbers)
	})
	var token uint64
	c.atLeader("a numbered acquire after the upgrade", func(n *cluster.Node) error {
		res, err := n.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "l", Attempt: cluster.Attempt{Seq: 1}})
		if err == nil && res.Status != fsm.StatusOK {
			t.Fatalf("numbered acquire after the upgrade: %+v", res)
		}
		token = res.Token
		return err
	})
	// Released, with the attempt: its late request is refused on every node's state.
	c.atLeader("the release", func(n *cluster.Node) error {
		res, err := n.Release(opContext(t), s, "l", token, cluster.Attempt{Seq: 1})
		if err == nil && res.Status != fsm.StatusOK && res.Status != fsm.StatusNotHolder { // NotHolder: a repeat
			t.Fatalf("release: %+v", res)
		}
		return err
	})
	c.atLeader("the late request", func(n *cluster.Node) error {
		late, err := n.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "l", Attempt: cluster.Attempt{Seq: 1}})
		if err == nil && late.Status != fsm.StatusAttemptCancelled {
			t.Fatalf("late request of an ended attempt: %+v", late)
		}
		return err
	})
	c.waitConverged()
}

// A node that lacks a feature the cluster has enabled is refused when it asks to join: it
// could not apply the log.
func TestJoinOfANodeLackingAnEnabledFeatureIsRefused(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	_, leader := c.waitLeader()
	testkit.Eventually(t, leaderTimeout, "features enabled", func() bool { return len(leader.FSM().Features()) == len(fsm.AllFeatures()) })
	old := newTestCluster(t, 1, func(cfg *cluster.Config) { cfg.Features = []fsm.Feature{} })
	old.waitLeader()
	err := leader.AddMember(opContext(t), "old", "127.0.0.1:1", old.https[0].Listener.Addr().String())
	if !errors.Is(err, cluster.ErrIncompatible) {
		t.Fatalf("adding a node without the cluster's features: %v, want ErrIncompatible", err)
	}
	if ms, _ := leader.Members(); len(ms) != 1 {
		t.Fatalf("members after the refusal: %+v", ms)
	}
}

// A try refused because the lock is held ends its attempt in the command that refused it
// (feature attempt-ends), through the log of a real cluster: the same request delivered
// again once the lock is free is refused, not granted to a session whose client gave the
// try up.
func TestRefusedTryEndsItsAttemptInTheLog(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	_, leader := c.waitLeader()
	testkit.Eventually(t, leaderTimeout, "features enabled", func() bool { return leader.FeatureEnabled(fsm.FeatureAttemptEnds) })
	a := createSession(t, leader, "a", longTTL, 0)
	b := createSession(t, leader, "b", longTTL, 0)
	token := mustAcquire(t, leader, a, "l", "")
	try := cluster.AcquireRequest{Session: b, Lock: "l", Attempt: cluster.Attempt{Seq: 1, Floor: 1}}
	res, err := leader.Acquire(opContext(t), try)
	if err != nil || res.Status != fsm.StatusLockHeld {
		t.Fatalf("try while held: %+v, %v", res, err)
	}
	mustRelease(t, leader, a, "l", token)
	late, err := leader.Acquire(opContext(t), try)
	if err != nil || late.Status != fsm.StatusAttemptCancelled {
		t.Fatalf("the refused try delivered again: %+v, %v; want attempt_cancelled", late, err)
	}
	if l := leader.FSM().Lock("l"); l.Held || l.Waiters != 0 {
		t.Fatalf("lock after the late try: %+v", l)
	}
	c.waitConverged()
}
