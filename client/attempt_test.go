package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A Lock that succeeded while a request of its attempt was still on its way (a long poll the
// network delayed; a later chunk won the lock) is fenced by Unlock: the late request arrives
// after the release and must neither take the lock nor queue the session, which would then
// hold a lock nobody knows of.
func TestUnlockFencesTheAttemptThatWon(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 40*time.Second)
		name := lockName(t, "m")
		p, lc := tr.holding(t, dev)
		m := client.NewMutex(newSession(t, lc, client.WithTTL(time.Minute)), name, client.WithWaitChunk(time.Second))
		lockPastHeldRequest(ctx, t, p, m)
		lateRequestChangesNothing(ctx, t, p, c, name)
	})
}

// A TryLock whose first request was lost on its way and whose retry found the lock held fails,
// and withdraws its attempt: the lost request, arriving once the lock is free, must not take
// it.
func TestFailedTryLockWithdrawsItsAttempt(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 40*time.Second)
		name := lockName(t, "m")
		holder := lockedMutex(ctx, t, c, name)
		p, lc := tr.holding(t, dev, client.WithRequestTimeout(500*time.Millisecond))
		m := client.NewMutex(newSession(t, lc, client.WithTTL(time.Minute)), name)
		// The retry, after the first request's timeout, passes.
		if err := holdFirstRequest(ctx, t, p, m.TryLock); !errors.Is(err, client.ErrLockHeld) {
			t.Fatalf("TryLock: %v, want ErrLockHeld", err)
		}
		// The withdrawal runs in the background; the Mutex's next try waits for it.
		if err := m.TryLock(ctx); !errors.Is(err, client.ErrLockHeld) {
			t.Fatalf("second TryLock: %v, want ErrLockHeld", err)
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lateRequestChangesNothing(ctx, t, p, c, name)
	})
}

// A Lock given up while the cluster cannot be reached keeps withdrawing its attempt until it
// can: the server still holds the waiting request (its connection lost without the server
// noticing), so the session stays queued until the withdrawal gets through.
func TestWithdrawalOutlastsAnUnreachableCluster(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 60*time.Second)
		name := lockName(t, "m")
		holder := lockedMutex(ctx, t, c, name)
		lk, wc := tr.cuttable(t, dev, client.WithRetryTimeout(200*time.Millisecond))
		waiter := client.NewMutex(newSession(t, wc, client.WithTTL(time.Minute)), name, client.WithWaitChunk(30*time.Second))
		wctx, giveUp := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- waiter.Lock(wctx) }()
		waitWaiters(ctx, t, c, name, 1)
		lk.Strand()
		giveUp()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock given up: %v", err)
		}
		// Let the withdrawal fail for a while (several retry timeouts), then heal the network.
		time.Sleep(time.Second) // nothing to await: the test is that failures are retried
		if l, err := c.GetLock(ctx, name); err != nil || l.Waiters != 1 {
			t.Fatalf("while cut off: %+v, %v; want the waiter still queued", l, err)
		}
		lk.Heal()
		waitWaiters(ctx, t, c, name, 0)
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err := c.GetLock(ctx, name); err != nil || l.Held {
			t.Fatalf("after the holder left, lock %+v (%v): the waiter that gave up got it", l, err)
		}
	})
}

// An Unlock that cannot reach the cluster goes on releasing in the background while the
// session lives, instead of leaving the lock held until the session ends.
func TestUnlockReleasesInTheBackgroundAfterAFailure(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 60*time.Second)
		name := lockName(t, "m")
		lk, hc := tr.cuttable(t, dev, client.WithRetryTimeout(200*time.Millisecond))
		m := lockedMutex(ctx, t, hc, name, client.WithTTL(time.Minute))
		lk.Cut()
		if err := m.Unlock(ctx); err == nil || errors.Is(err, client.ErrLockLost) {
			t.Fatalf("Unlock while cut off: %v, want a failure to reach the cluster", err)
		}
		if m.Token() != 0 || m.Context().Err() == nil {
			t.Fatal("the Mutex still believes it holds after Unlock")
		}
		lk.Heal()
		testkit.Eventually(t, 20*time.Second, "the lock to be released", func() bool {
			l, err := c.GetLock(ctx, name)
			return err == nil && !l.Held
		})
		if err := m.Session().Err(); err != nil {
			t.Fatalf("session: %v", err)
		}
	})
}
