package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// The probe of issue 18: a holder whose session is lost (destroyed here, as an expiry would)
// while another session is granted the lock must forget its hold. By the time Done closes,
// Token is 0 and Lock and TryLock fail with the session's error; neither reports the lost
// hold as success.
func TestLostHoldIsForgottenBeforeDoneCloses(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 30*time.Second)
	name := lockName(t, "m")
	a := lockedMutex(ctx, t, c, name, client.WithTTL(10*time.Second))
	if a.Token() == 0 {
		t.Fatal("no token after Lock")
	}
	b := client.NewMutex(newSession(t, c), name)
	granted := make(chan error, 1)
	go func() { granted <- b.Lock(ctx) }()
	waitWaiters(ctx, t, c, name, 1)

	if _, err := c.Raw().DestroySession(ctx, a.Session().ID()); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("B: %v", err)
	}
	select {
	case <-a.Session().Done():
	case <-ctx.Done():
		t.Fatal("A's Done never closed")
	}
	// Nothing awaited between Done and these checks: the loss must be known everywhere.
	if tok := a.Token(); tok != 0 {
		t.Errorf("Token after the session was lost: %d, want 0", tok)
	}
	if a.Context().Err() == nil {
		t.Error("Context not done when Done closed")
	}
	err := a.Lock(ctx)
	if err == nil || !errors.Is(err, client.ErrSessionNotFound) {
		t.Errorf("Lock after the session was lost: %v, want the session's error", err)
	}
	err = a.TryLock(ctx)
	if err == nil || !errors.Is(err, client.ErrSessionNotFound) {
		t.Errorf("TryLock after the session was lost: %v, want the session's error", err)
	}
	if l, err := c.GetLock(ctx, name); err != nil || l.Session != b.Session().ID() || l.Token != b.Token() {
		t.Fatalf("lock %+v, %v: want B's", l, err)
	}
	if err := a.Unlock(ctx); !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("Unlock after the loss: %v, want ErrLockLost", err)
	}
}

// Loss hooks run before Done closes, and Err is set before either: a goroutine woken by Done
// finds every Mutex of the session already forgotten.
func TestSessionErrIsSetBeforeDoneCloses(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 30*time.Second)
	s := newSession(t, c, client.WithTTL(10*time.Second))
	mutexes := make([]*client.Mutex, 5)
	for i := range mutexes {
		mutexes[i] = client.NewMutex(s, lockName(t, string(rune('a'+i))))
		if err := mutexes[i].Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	e := client.NewElection(s, lockName(t, "election"))
	if err := e.Campaign(ctx, "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Raw().DestroySession(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	if s.Err() == nil {
		t.Fatal("Err is nil after Done closed")
	}
	for i, m := range mutexes {
		if m.Token() != 0 || m.Context().Err() == nil {
			t.Errorf("mutex %d still holds (token %d) when Done closed", i, m.Token())
		}
	}
	if e.Token() != 0 || e.IsLeader() || e.Context().Err() == nil {
		t.Errorf("election still led (token %d) when Done closed", e.Token())
	}
	if err := e.Campaign(ctx, "v"); !errors.Is(err, client.ErrSessionNotFound) {
		t.Errorf("Campaign after the session was lost: %v, want the session's error", err)
	}
	if err := e.Proclaim(ctx, "w"); !errors.Is(err, client.ErrNotLeader) {
		t.Errorf("Proclaim after the session was lost: %v, want ErrNotLeader", err)
	}
}

// A leadership lost while the session lives (its lock released with the session's id and
// token, as an operator could) is noticed by Proclaim, which reports it and forgets the
// leadership, as etcd's Election does; Campaign then campaigns anew.
func TestProclaimReportsLeadershipLostWhileSessionLives(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 30*time.Second)
	name := lockName(t, "e")
	s := newSession(t, c)
	e := client.NewElection(s, name)
	if err := e.Campaign(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	old := e.Token()
	if err := c.Raw().Release(ctx, name, s.ID(), old); err != nil {
		t.Fatal(err)
	}
	// Someone else leads now: Proclaim must not succeed, and must forget the leadership.
	other := client.NewElection(newSession(t, c), name)
	if err := other.Campaign(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	err := e.Proclaim(ctx, "one-b")
	if !errors.Is(err, client.ErrLockLost) || !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("Proclaim after the leadership was lost: %v, want ErrLockLost and ErrNotLeader", err)
	}
	if e.IsLeader() || e.Token() != 0 || e.Context().Err() == nil {
		t.Fatalf("after the failed Proclaim: leader %v, token %d", e.IsLeader(), e.Token())
	}
	if l, err := e.Leader(ctx); err != nil || l.Value != "two" {
		t.Fatalf("leader %+v, %v", l, err)
	}
	// Lost while nobody else leads: Proclaim's acquire would win the lock anew, which it must
	// give back rather than keep unseen.
	if err := other.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Campaign(ctx, "one-c"); err != nil {
		t.Fatalf("Campaign after the loss: %v", err)
	}
	if e.Token() <= old {
		t.Fatalf("new leadership's token %d not above %d", e.Token(), old)
	}
	tok := e.Token()
	if err := c.Raw().Release(ctx, name, s.ID(), tok); err != nil {
		t.Fatal(err)
	}
	err = e.Proclaim(ctx, "one-d")
	if !errors.Is(err, client.ErrLockLost) || !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("Proclaim after the leadership was lost: %v, want ErrLockLost and ErrNotLeader", err)
	}
	if e.IsLeader() || e.Token() != 0 {
		t.Fatalf("after the failed Proclaim: leader %v, token %d", e.IsLeader(), e.Token())
	}
	waitFor(t, 10*time.Second, "the lock won by the failed Proclaim to be given back", func() bool {
		l, err := c.GetLock(ctx, name)
		return err == nil && !l.Held
	})
}

// A session holds a lock at most once: a second Mutex of the session for a lock the first
// holds is refused instead of sharing the first one's grant, which it could release or
// withdraw under the first one's feet.
func TestSecondMutexOfASessionIsRefused(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 20*time.Second)
	name := lockName(t, "m")
	s := newSession(t, c)
	first := client.NewMutex(s, name)
	if err := first.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	second := client.NewMutex(s, name)
	if err := second.TryLock(ctx); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("TryLock by a second Mutex of the holding session: %v, want ErrInvalidArgument", err)
	}
	if second.Token() != 0 {
		t.Fatal("the second Mutex believes it holds")
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := second.TryLock(ctx); err != nil {
		t.Fatalf("TryLock once the first let go: %v", err)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
