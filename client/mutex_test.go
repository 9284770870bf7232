package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

func TestMutexContendersNeverOverlapAndAreGrantedInArrivalOrder(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 60*time.Second)
		name := lockName(t, "m")
		const n = 20

		mutexes := make([]*client.Mutex, n)
		for i := range mutexes {
			mutexes[i] = client.NewMutex(newSession(t, c, client.WithTTL(10*time.Second)), name)
		}
		if err := mutexes[0].TryLock(ctx); err != nil {
			t.Fatalf("first TryLock: %v", err)
		}

		var inside atomic.Int32
		var mu sync.Mutex
		var order []int
		var tokens []uint64
		errs := make(chan error, n)
		var wg sync.WaitGroup
		// Start the waiters one at a time, each after the previous one is queued, so that the
		// arrival order is known.
		for i := 1; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				m := mutexes[i]
				if err := m.Lock(ctx); err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					errs <- errors.New("two holders at once")
				}
				mu.Lock()
				order = append(order, i)
				tokens = append(tokens, m.Token())
				mu.Unlock()
				// While we hold it, the cluster must say so.
				l, err := c.GetLock(ctx, name)
				if err != nil || !l.Held || l.Session != m.Session().ID() || l.Token != m.Token() {
					errs <- errors.New("cluster disagrees about the holder")
				}
				inside.Add(-1)
				if err := m.Unlock(ctx); err != nil {
					errs <- err
				}
			}(i)
			waitWaiters(ctx, t, c, name, i)
		}
		first := mutexes[0].Token()
		if err := mutexes[0].Unlock(ctx); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for i, got := range order {
			if got != i+1 {
				t.Fatalf("grant order %v, want 1..%d", order, n-1)
			}
		}
		prev := first
		for _, tok := range tokens {
			if tok <= prev {
				t.Fatalf("tokens not increasing: first %d then %v", first, tokens)
			}
			prev = tok
		}
	})
}

// acquireCounter counts the acquire requests sent through it.
type acquireCounter struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (a *acquireCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/acquire") {
		a.n.Add(1)
	}
	return a.next.RoundTrip(r)
}

func TestMutexKeepsItsPlaceAcrossWaitChunks(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 60*time.Second)
	name := lockName(t, "m")
	holder := client.NewMutex(newSession(t, c), name)
	if err := holder.TryLock(ctx); err != nil {
		t.Fatal(err)
	}

	// The first waiter long-polls in chunks of two seconds, so its waits elapse while it waits.
	counter := &acquireCounter{next: http.DefaultTransport.(*http.Transport).Clone()}
	t.Cleanup(counter.next.(*http.Transport).CloseIdleConnections)
	cb := newClient(t, dev.Endpoints(), client.WithTransport(counter))
	first := client.NewMutex(newSession(t, cb), name, client.WithWaitChunk(2*time.Second))
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Lock(ctx) }()
	waitWaiters(ctx, t, c, name, 1)
	// The second waits in one long request, so it never leaves the queue on its own.
	second := newSession(t, c)
	secondDone := make(chan *api.AcquireResponse, 1)
	go func() {
		g, err := c.Raw().Acquire(ctx, name, api.AcquireRequest{Session: second.ID(), Wait: "50s"})
		if err != nil {
			t.Errorf("second waiter: %v", err)
		}
		secondDone <- g
	}()
	waitWaiters(ctx, t, c, name, 2)
	sent := counter.n.Load()
	testkit.Eventually(t, 20*time.Second, "two of the first waiter's chunks to hand over", func() bool {
		return counter.n.Load() >= sent+2
	})
	if l, err := c.GetLock(ctx, name); err != nil || l.Waiters != 2 {
		t.Fatalf("after the first waiter's chunks elapsed: %+v, %v; want 2 waiters", l, err)
	}

	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-firstDone:
		if err != nil {
			t.Fatalf("first waiter: %v", err)
		}
	case g := <-secondDone:
		t.Fatalf("the second waiter was granted first (%+v): the first lost its place when a chunk elapsed", g)
	}
	select {
	case g := <-secondDone:
		t.Fatalf("the second waiter was granted while the first held the lock: %+v", g)
	default:
	}
	if l, err := c.GetLock(ctx, name); err != nil || l.Session != first.Session().ID() || l.Waiters != 1 {
		t.Fatalf("after the first waiter's grant: %+v, %v", l, err)
	}
	firstToken := first.Token()
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-secondDone; g == nil || g.Session != second.ID() || g.Token <= firstToken {
		t.Fatalf("second waiter's grant %+v after the first's token %d", g, firstToken)
	}
}

func TestMutexManyRoundsNeverOverlap(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 60*time.Second)
		name := lockName(t, "m")
		var inside, rounds atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for i := 0; i < 10; i++ {
			m := client.NewMutex(newSession(t, c, client.WithTTL(10*time.Second)), name)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < 3; r++ {
					if err := m.Lock(ctx); err != nil {
						errs <- err
						return
					}
					if inside.Add(1) != 1 {
						errs <- errors.New("two holders at once")
					}
					rounds.Add(1)
					if _, err := c.GetLock(ctx, name); err != nil {
						errs <- err
					}
					inside.Add(-1)
					if err := m.Unlock(ctx); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if rounds.Load() != 30 {
			t.Fatalf("%d rounds, want 30", rounds.Load())
		}
	})
}

func TestTryLockNamesTheHolder(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 20*time.Second)
	name := lockName(t, "m")
	a := client.NewMutex(newSession(t, c), name, client.WithValue("host-a"))
	b := client.NewMutex(newSession(t, c), name)
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Token() == 0 || a.Key() != name || a.Context().Err() != nil {
		t.Fatalf("after Lock: token %d, key %q, ctx %v", a.Token(), a.Key(), a.Context().Err())
	}
	err := b.TryLock(ctx)
	var ae *client.APIError
	if !errors.Is(err, client.ErrLockHeld) || !errors.As(err, &ae) || ae.Holder == nil ||
		ae.Holder.Token != a.Token() || ae.Holder.Session != a.Session().ID() {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	if b.Context().Err() == nil || b.Token() != 0 {
		t.Fatal("a failed TryLock left the mutex looking held")
	}
	l, err := c.GetLock(ctx, name)
	if err != nil || l.Value != "host-a" || l.Waiters != 0 {
		t.Fatalf("lock %+v, %v: want value host-a and no waiter", l, err)
	}
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Context().Err() == nil {
		t.Fatal("Context not cancelled by Unlock")
	}
	if err := a.Unlock(ctx); !errors.Is(err, client.ErrNotHolder) {
		t.Fatalf("second Unlock: %v, want ErrNotHolder", err)
	}
}

func TestLockGivenUpLeavesNoHolderOrWaiter(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 20*time.Second)
	name := lockName(t, "m")
	holder := lockedMutex(ctx, t, c, name)
	waiter := client.NewMutex(newSession(t, c), name)
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- waiter.Lock(wctx) }()
	waitWaiters(ctx, t, c, name, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Lock: %v", err)
	}
	waitWaiters(ctx, t, c, name, 0)
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.GetLock(ctx, name)
	if err != nil || l.Held {
		t.Fatalf("after the holder left, lock %+v (%v): the abandoned waiter got it", l, err)
	}
}

// TestLockGivenUpWhileTheServerHoldsItsRequest gives up a Lock whose waiting request the
// server still holds: the connection was dropped without the server noticing. That request
// keeps the session's queue entry, so Lock must take the session out of the queue itself, or
// the next release grants the lock to a session whose Mutex does not hold it, and nobody else
// gets it while that session lives.
func TestLockGivenUpWhileTheServerHoldsItsRequest(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 40*time.Second)
		name := lockName(t, "m")
		holder := lockedMutex(ctx, t, c, name)
		p, wc := tr.cuttable(t, dev)
		waiter := client.NewMutex(newSession(t, wc), name, client.WithWaitChunk(30*time.Second))
		wctx, giveUp := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- waiter.Lock(wctx) }()
		waitWaiters(ctx, t, c, name, 1)
		p.Strand()
		giveUp()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock given up: %v", err)
		}
		p.Heal() // new requests pass; the server still holds the stranded one
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// The withdrawal runs in the background: the lock may go to the waiter's session for a
		// moment, but not for good.
		testkit.Eventually(t, 10*time.Second, "the lock to be free and unawaited", func() bool {
			l, err := c.GetLock(ctx, name)
			return err == nil && !l.Held && l.Waiters == 0
		})
	})
}

// A request of a Lock call that reaches the server only after Lock gave up (delayed on its
// way, here by a proxy) must not be granted: Lock cancelled its attempt, and the server refuses
// the attempt's late request instead of handing the lock to a session that stopped waiting.
func TestLockGivenUpBeforeItsRequestArrived(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 40*time.Second)
		name := lockName(t, "m")
		holder := lockedMutex(ctx, t, c, name)
		p, wc := tr.holding(t, dev)
		waiter := client.NewMutex(newSession(t, wc, client.WithTTL(time.Minute)), name, client.WithWaitChunk(30*time.Second))
		giveUpWhileHeld(ctx, t, p, waiter.Lock)
		// The attempt is withdrawn in the background; the Mutex's next try waits for that.
		if err := waiter.TryLock(ctx); !errors.Is(err, client.ErrLockHeld) {
			t.Fatalf("TryLock after the withdrawal: %v, want ErrLockHeld", err)
		}
		// The lock is free when the late request arrives: only the cancelled attempt stops it.
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lateRequestChangesNothing(ctx, t, p, c, name)
	})
}

// The same, with many Lock/Unlock cycles of the session in between: a session used to forget
// all but its last 16 cancelled attempts, so that the late request of an early one was granted
// and the session held a lock that none of its Mutexes believed it held.
func TestLateRequestRefusedAfterManyCycles(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := sharedCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 60*time.Second)
		name := lockName(t, "m")
		holder := lockedMutex(ctx, t, c, name)
		p, wc := tr.holding(t, dev)
		s := newSession(t, wc, client.WithTTL(time.Minute))
		waiter := client.NewMutex(s, name, client.WithWaitChunk(30*time.Second))
		giveUpWhileHeld(ctx, t, p, waiter.Lock)
		for i := range 40 {
			m := client.NewMutex(s, fmt.Sprintf("%s-other-%d", name, i%3))
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := holder.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lateRequestChangesNothing(ctx, t, p, c, name)
	})
}

func TestMutexSurvivesLeaderCrash(t *testing.T) {
	eachTransport(t, func(t *testing.T, tr transport) {
		dev := ownCluster(t)
		c := tr.client(t, dev)
		ctx := testCtx(t, 40*time.Second)
		name := lockName(t, "m")
		holder := lockedMutex(ctx, t, c, name, client.WithTTL(5*time.Second))
		waiter := client.NewMutex(newSession(t, c, client.WithTTL(5*time.Second)), name)
		done := make(chan error, 1)
		go func() { done <- waiter.Lock(ctx) }()
		waitWaiters(ctx, t, c, name, 1)
		crashLeader(ctx, t, dev)
		// The hold and the queue outlive the crash: releasing hands the lock to the waiter.
		held := holder.Token()
		if err := holder.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after the crash: %v", err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("waiter: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("waiter never got the lock")
		}
		if waiter.Token() <= held {
			t.Fatalf("waiter token %d not above the first holder's %d", waiter.Token(), held)
		}
		if holder.Session().Err() != nil || waiter.Session().Err() != nil {
			t.Fatalf("a session was lost in the crash: %v, %v", holder.Session().Err(), waiter.Session().Err())
		}
	})
}

func TestFenceRejectsTheTokenOfAPreviousHolder(t *testing.T) {
	dev := sharedCluster(t)
	c := newClient(t, dev.Endpoints())
	ctx := testCtx(t, 20*time.Second)
	name := lockName(t, "m")
	fence := client.NewFence()
	old := lockedMutex(ctx, t, c, name)
	oldToken := old.Token()
	if err := fence.Check(name, oldToken); err != nil {
		t.Fatal(err)
	}
	// The old holder's session ends (as after a pause past its TTL) and a new holder writes.
	if err := old.Session().Close(ctx); err != nil {
		t.Fatal(err)
	}
	newer := lockedMutex(ctx, t, c, name)
	if err := fence.Check(name, newer.Token()); err != nil {
		t.Fatalf("new holder's token %d: %v", newer.Token(), err)
	}
	if err := fence.Check(name, oldToken); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("old holder's token %d after %d: %v, want ErrStaleToken", oldToken, newer.Token(), err)
	}
	chk, err := c.Raw().CheckToken(ctx, name, oldToken)
	if err != nil || chk.Current || chk.Token != newer.Token() {
		t.Fatalf("CheckToken(old) = %+v, %v", chk, err)
	}
}
