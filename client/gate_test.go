package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// lateFirstRequest runs the sequence on a client of node 0 of dev: the first request
// of a Lock is held back (the Lock wins with its next one), then, after between (an upgrade,
// say), more Lock/Unlock cycles of the same session (cycles), and the held request is
// delivered: it must be refused, leaving the lock free and unawaited, not granted to a
// session in which no Mutex believes it holds the lock.
func lateFirstRequest(ctx context.Context, t *testing.T, dev *agent.Dev, cycles int, between func()) {
	t.Helper()
	p, c := inProcessHolding(t, dev)
	name := lockName(t, "first")
	m := client.NewMutex(newSession(t, c, client.WithTTL(time.Minute)), name, client.WithWaitChunk(time.Second))
	lockPastHeldRequest(ctx, t, p, m)
	between()
	for range cycles {
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lateRequestChangesNothing(ctx, t, p, c, name)
}

// A client that starts as soon as a new cluster answers /v1/ready gets the cluster's rules
// from its first request: readiness waits until the leader has enabled the features every
// member supports, and a try begun before still cannot be granted by a late request after
// them. (Before, the first Lock used a string attempt that 40 cycles made the session forget,
// and its late request was granted.)
func TestFirstLockOnANewClusterIsNotGrantedLate(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	dev, err := agent.StartDev(ctx, agent.DevOptions{ReturnWhenReady: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	// A node answered /v1/ready: the leader had enabled every feature by then, and a node that
	// applied that stays so (a leader elected since may not have applied it yet).
	some := false
	for i := range dev.Size() {
		if a := dev.Agent(i); a != nil && a.Node().FeatureEnabled(fsm.FeatureAttemptEnds) {
			some = true
		}
	}
	if !some {
		t.Fatal("a node was ready before any node applied the features' enabling")
	}
	lateFirstRequest(ctx, t, dev, 40, func() {})
}

// The same during a rolling upgrade: a client that starts while a member runs an older
// version (without numbered attempts) numbers its tries in the string form, learns that the
// gate moved once the last member is upgraded, without a restart, and a late request of a try
// begun before the upgrade is refused after it. (Before, the client kept string attempts for
// 30 s after the upgrade, and forgot its first one after 16 more.)
func TestLockBegunBeforeAnUpgradeIsNotGrantedLateAfterIt(t *testing.T) {
	ctx := testCtx(t, 120*time.Second)
	older := []string{string(fsm.FeatureAttemptNumbers), string(fsm.FeatureAttemptEnds)}
	dev, err := agent.StartDev(ctx, agent.DevOptions{Tune: func(cfg *config.Config) {
		if cfg.ID == "n3" {
			cfg.DisableFeatures = older
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	enabled := func(f fsm.Feature) bool {
		i, err := dev.WaitLeader(ctx)
		return err == nil && dev.Agent(i) != nil && dev.Agent(i).Node().FeatureEnabled(f)
	}
	testkit.Eventually(t, 60*time.Second, "the features all members share enabled", func() bool {
		return enabled(fsm.FeatureSemaphoresRWLocks)
	})
	if enabled(fsm.FeatureAttemptNumbers) {
		t.Fatal("attempt-numbers enabled while n3 lacks it")
	}
	// Before the gate moves, the client gets the previous version's rule: its tries, in the
	// string form, are fenced by the session's last 16 ends.
	lateFirstRequest(ctx, t, dev, 10, func() {})
	if enabled(fsm.FeatureAttemptNumbers) {
		t.Fatal("attempt-numbers enabled while n3 lacks it")
	}
	lateFirstRequest(ctx, t, dev, 40, func() {
		// Upgrade n3 (node 2; the client's node is node 0).
		if err := dev.Kill(2); err != nil {
			t.Fatal(err)
		}
		if err := dev.RestartWith(ctx, 2, func(cfg *config.Config) { cfg.DisableFeatures = nil }); err != nil {
			t.Fatal(err)
		}
		testkit.Eventually(t, 60*time.Second, "attempt-ends enabled after the upgrade", func() bool {
			return enabled(fsm.FeatureAttemptEnds) && enabled(fsm.FeatureAttemptNumbers)
		})
	})
}
