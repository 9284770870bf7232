package cluster_test

import (
	"errors"
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
	_, leader = c.waitLeader()
	if leader.FeatureEnabled(fsm.FeatureAttemptNumbers) {
		t.Fatal("attempt-numbers enabled while n3 lacks it")
	}
	s := createSession(t, leader, "w", longTTL, 0)
	_, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "l", Attempt: cluster.Attempt{Seq: 1}})
	if !errors.Is(err, cluster.ErrFeatureNotEnabled) {
		t.Fatalf("numbered acquire before the upgrade: %v, want ErrFeatureNotEnabled", err)
	}
	// The leader reports what each member said of itself.
	members, err := leader.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if m.Report == nil || m.ID == "n3" == slices.Contains(m.Report.Features, fsm.FeatureAttemptNumbers) {
			t.Fatalf("member %s report %+v", m.ID, m.Report)
		}
	}

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
	_, leader = c.waitLeader()
	res, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "l", Attempt: cluster.Attempt{Seq: 1}})
	if err != nil || res.Status != fsm.StatusOK {
		t.Fatalf("numbered acquire after the upgrade: %+v, %v", res, err)
	}
	mustRelease(t, leader, s, "l", res.Token)
	// ...and fenced: the ended attempt's late request is refused on every node's state.
	if _, err := leader.Release(opContext(t), s, "l", res.Token, cluster.Attempt{Seq: 1}); err != nil {
		t.Fatal(err)
	}
	late, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: s, Lock: "l", Attempt: cluster.Attempt{Seq: 1}})
	if err != nil || late.Status != fsm.StatusAttemptCancelled {
		t.Fatalf("late request of an ended attempt: %+v, %v", late, err)
	}
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
