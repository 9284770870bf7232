package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// At most Limit of many contenders hold a Semaphore at once, each under a token no other has,
// every one of them gets a permit, and the cluster lists the holders each believes it is.
func TestSemaphoreHoldsAtMostLimit(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 60*time.Second)
	name := lockName(t, "s")
	const n, limit = 8, 3
	var inside, most atomic.Int32
	var mu sync.Mutex
	tokens := map[uint64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		sem := client.NewSemaphore(newSession(t, c), name, limit, client.WithValue(fmt.Sprint("w", i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sem.Acquire(ctx); err != nil {
				errs <- err
				return
			}
			now := inside.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			mu.Lock()
			dup := tokens[sem.Token()]
			tokens[sem.Token()] = true
			mu.Unlock()
			if dup || sem.Token() == 0 {
				errs <- fmt.Errorf("token %d given twice or zero", sem.Token())
			}
			l, err := c.GetLock(ctx, name)
			found := false
			for _, h := range l.Holders {
				found = found || h.Session == sem.Session().ID() && h.Token == sem.Token()
			}
			if err != nil || l.Limit != limit || !found || len(l.Holders) > limit {
				errs <- fmt.Errorf("cluster shows %+v (%v) while %d holds", l, err, sem.Token())
			}
			time.Sleep(20 * time.Millisecond) // hold a moment, so that holds overlap
			inside.Add(-1)
			if err := sem.Release(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(tokens) != n || most.Load() > limit {
		t.Fatalf("%d grants, at most %d at once", len(tokens), most.Load())
	}
}

// TryAcquire fails at once on a full semaphore, naming the newest holder; another limit is
// refused with ErrLimitMismatch (a Mutex is a semaphore of one), as is a limit out of range.
func TestSemaphoreRefusals(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 30*time.Second)
	name := lockName(t, "s")
	a := client.NewSemaphore(newSession(t, c), name, 1)
	if err := a.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	b := client.NewSemaphore(newSession(t, c), name, 1)
	err := b.TryAcquire(ctx)
	var ae *client.APIError
	if !errors.Is(err, client.ErrLockHeld) || !errors.As(err, &ae) || ae.Holder == nil || ae.Holder.Token != a.Token() {
		t.Fatalf("TryAcquire on a full semaphore: %v", err)
	}
	if b.Token() != 0 || b.Context().Err() == nil {
		t.Fatal("a refused TryAcquire holds")
	}
	// A limit of 1 is a Mutex: a Mutex waits for it like any other holder.
	if err := client.NewMutex(newSession(t, c), name).TryLock(ctx); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("Mutex on a semaphore of one: %v", err)
	}
	err = client.NewSemaphore(newSession(t, c), name, 2).TryAcquire(ctx)
	if !errors.Is(err, client.ErrLimitMismatch) || !errors.As(err, &ae) || ae.Limit != 1 {
		t.Fatalf("another limit: %v", err)
	}
	for _, bad := range []int{0, 1001} {
		if err := client.NewSemaphore(newSession(t, c), name, bad).Acquire(ctx); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("limit %d: %v", bad, err)
		}
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("second Release: %v", err)
	}
}

// A permit lost with its session is forgotten before Done closes, as a Mutex's hold is, and
// the next waiter gets it.
func TestSemaphorePermitLostWithTheSession(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 30*time.Second)
	name := lockName(t, "s")
	a := client.NewSemaphore(newSession(t, c), name, 2)
	other := client.NewSemaphore(newSession(t, c), name, 2)
	for _, s := range []*client.Semaphore{a, other} {
		if err := s.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	b := client.NewSemaphore(newSession(t, c), name, 2)
	granted := make(chan error, 1)
	go func() { granted <- b.Acquire(ctx) }()
	waitWaiters(ctx, t, c, name, 1)
	if _, err := c.Raw().DestroySession(ctx, a.Session().ID()); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	<-a.Session().Done()
	if a.Token() != 0 || a.Context().Err() == nil || !errors.Is(context.Cause(a.Context()), client.ErrLockLost) {
		t.Fatalf("after the loss: token %d, context %v", a.Token(), context.Cause(a.Context()))
	}
	if err := a.Acquire(ctx); !errors.Is(err, client.ErrSessionNotFound) {
		t.Fatalf("Acquire after the loss: %v", err)
	}
	if err := a.Release(ctx); !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("Release after the loss: %v", err)
	}
}

// Readers share an RWMutex, a writer waits for all of them and excludes every one, and a
// reader that comes after a waiting writer waits behind it; every hold has its own token.
func TestRWMutexReadersShareAndWritersExclude(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 30*time.Second)
	name := lockName(t, "rw")
	r1, r2 := client.NewRWMutex(newSession(t, c), name), client.NewRWMutex(newSession(t, c), name)
	for _, r := range []*client.RWMutex{r1, r2} {
		if err := r.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		if !r.Shared() {
			t.Fatal("a read hold is not shared")
		}
	}
	if r1.Token() == r2.Token() {
		t.Fatalf("two readers under token %d", r1.Token())
	}
	w := client.NewRWMutex(newSession(t, c), name)
	if err := w.TryLock(ctx); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("TryLock beside readers: %v", err)
	}
	wrote := make(chan error, 1)
	go func() { wrote <- w.Lock(ctx) }()
	waitWaiters(ctx, t, c, name, 1)
	r3 := client.NewRWMutex(newSession(t, c), name)
	if err := r3.TryRLock(ctx); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("TryRLock behind a waiting writer: %v", err)
	}
	read := make(chan error, 1)
	go func() { read <- r3.RLock(ctx) }()
	waitWaiters(ctx, t, c, name, 2)
	// The holders cannot change their mode in place.
	if err := r1.Lock(ctx); !errors.Is(err, client.ErrModeMismatch) {
		t.Fatalf("Lock while holding shared: %v", err)
	}
	if err := r1.Unlock(ctx); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("Unlock of a read hold: %v", err)
	}
	for _, r := range []*client.RWMutex{r1, r2} {
		if err := r.RUnlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if w.Shared() || w.Token() <= r2.Token() {
		t.Fatalf("writer shared %v, token %d after %d", w.Shared(), w.Token(), r2.Token())
	}
	select {
	case err := <-read:
		t.Fatalf("the reader behind the writer got in beside it: %v", err)
	default:
	}
	if err := w.RUnlock(ctx); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("RUnlock of a write hold: %v", err)
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-read; err != nil || r3.Token() <= w.Token() {
		t.Fatalf("reader after the writer: %v, token %d", err, r3.Token())
	}
}

// A Semaphore's and an RWMutex's attempts are withdrawn as a Mutex's are: the request of an
// Acquire (or RLock) given up while the network held it, delivered after a permit freed, is
// refused, so the session holds nothing that none of its primitives believes it holds.
func TestLateRequestsOfSemaphoresAndRWMutexesAreRefused(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 60*time.Second)
	for _, kind := range []string{"semaphore", "rwmutex"} {
		name := lockName(t, kind)
		p, wc := holdingClient(t, dev.Endpoints()[0])
		s := newSession(t, wc, client.WithTTL(time.Minute))
		var release, take, try func(context.Context) error
		if kind == "semaphore" {
			holder := client.NewSemaphore(newSession(t, c), name, 1)
			if err := holder.Acquire(ctx); err != nil {
				t.Fatal(err)
			}
			waiter := client.NewSemaphore(s, name, 1, client.WithWaitChunk(30*time.Second))
			release, take, try = holder.Release, waiter.Acquire, waiter.TryAcquire
		} else {
			holder := client.NewRWMutex(newSession(t, c), name)
			if err := holder.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			waiter := client.NewRWMutex(s, name, client.WithWaitChunk(30*time.Second))
			release, take, try = holder.Unlock, waiter.RLock, waiter.TryRLock
		}
		giveUpWhileHeld(ctx, t, p, take)
		// The attempt is withdrawn in the background; the next try waits for that.
		if err := try(ctx); !errors.Is(err, client.ErrLockHeld) {
			t.Fatalf("%s: try after the withdrawal: %v, want ErrLockHeld", kind, err)
		}
		if err := release(ctx); err != nil {
			t.Fatal(err)
		}
		lateRequestChangesNothing(ctx, t, p, c, name)
	}
}
