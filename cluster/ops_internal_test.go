package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// startWait queues session s for lock with a long wait in the background and returns once the
// session is queued; the result arrives on the returned channel.
func startWait(t *testing.T, n *Node, ctx context.Context, s fsm.SessionID, lock string) <-chan fsm.Result {
	t.Helper()
	ch := make(chan fsm.Result, 1)
	go func() {
		res, err := n.Acquire(ctx, AcquireRequest{Session: s, Lock: lock, Wait: time.Minute})
		if err != nil {
			res = fsm.Result{Status: fsm.StatusNotQueued, Err: err}
		}
		ch <- res
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !n.fsm.Queued(lock, s) {
		if time.Now().After(deadline) {
			t.Fatal("the session was not queued")
		}
		time.Sleep(time.Millisecond)
	}
	return ch
}

func session(t *testing.T, n *Node) fsm.SessionID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := n.CreateSession(ctx, "", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	return info.ID
}

// A waiting acquire answers only a grant made after it queued the session. A grant event with
// an older token (the session was granted and released before this request queued it) must not
// make its caller believe it holds the lock under a token that no longer holds it.
func TestWaitIgnoresAGrantOlderThanItsOwnAcquire(t *testing.T) {
	n := newSingleNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, waiter := session(t, n), session(t, n)
	res, err := n.Acquire(ctx, AcquireRequest{Session: holder, Lock: "l"})
	if err != nil || res.Status != fsm.StatusOK {
		t.Fatalf("holder acquire: %v %v", res.Status, err)
	}
	ch := startWait(t, n, ctx, waiter, "l")
	// A stale grant of the waiting session, as an earlier request's grant would be reported.
	n.events.observe([]fsm.Event{{Kind: fsm.EventGranted, Lock: "l", Session: waiter, Token: res.Token}})
	select {
	case got := <-ch:
		t.Fatalf("the wait answered %v with token %d before the lock was released", got.Status, got.Token)
	case <-time.After(200 * time.Millisecond): // the stale grant would have answered at once
	}
	if _, err := n.Release(ctx, holder, "l", res.Token, Attempt{}); err != nil {
		t.Fatal(err)
	}
	got := <-ch
	l := n.fsm.Lock("l")
	if got.Status != fsm.StatusOK || got.Token != l.Token || l.Holder != waiter {
		t.Fatalf("wait answered %v token %d; the lock is held by %v under %d", got.Status, got.Token, l.Holder, l.Token)
	}
}

// When a wait of the session ends while another request of the same session is registered,
// that other request owns the queue entry; if it then fails before it proposes anything, it
// must still remove the entry, as any request whose wait ends: nobody waits for it any more.
func TestRequestFailingBeforeProposingRemovesTheEntryLeftToIt(t *testing.T) {
	n := newSingleNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, waiter := session(t, n), session(t, n)
	if res, err := n.Acquire(ctx, AcquireRequest{Session: holder, Lock: "l"}); err != nil || res.Status != fsm.StatusOK {
		t.Fatalf("holder acquire: %v %v", res.Status, err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	ch := startWait(t, n, wctx, waiter, "l")
	// A second request of the session registers, as Acquire does before proposing.
	req := AcquireRequest{Session: waiter, Lock: "l", Wait: time.Minute}
	w2 := n.registerWait(req)
	wcancel() // the first request's client leaves: the entry is left to the second
	<-ch
	if !n.fsm.Queued("l", waiter) {
		t.Fatal("the first request removed the entry although another request of the session waits")
	}
	// The second request fails before proposing.
	if _, err := w2.withdraw(); err != nil {
		t.Fatal(err)
	}
	if n.fsm.Queued("l", waiter) {
		t.Fatal("the queue entry outlived every request of the session")
	}
}

// A wait that ends as its session is granted the lock reports the grant, even when another
// request of the same session still waits and owns the queue entry; never lock_held naming its
// own session.
func TestWaitEndRacingItsGrantReportsTheGrant(t *testing.T) {
	n := newSingleNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder, waiter := session(t, n), session(t, n)
	res, err := n.Acquire(ctx, AcquireRequest{Session: holder, Lock: "l"})
	if err != nil || res.Status != fsm.StatusOK {
		t.Fatalf("holder acquire: %v %v", res.Status, err)
	}
	// A request of the session queued it at or before index queuedAt, and its wait ends just
	// as the grant applies, while another request of the session still waits.
	ch := startWait(t, n, ctx, waiter, "l")
	queuedAt := n.raft.LastIndex()
	w := n.registerWait(AcquireRequest{Session: waiter, Lock: "l"})
	w.queued = queuedAt
	if _, err := n.Release(ctx, holder, "l", res.Token, Attempt{}); err != nil {
		t.Fatal(err)
	}
	<-ch
	other := n.registerWait(AcquireRequest{Session: waiter, Lock: "l"}) // a request of the session that still waits
	defer other.done()
	got, err := w.withdraw()
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != fsm.StatusOK || got.Token != n.fsm.Lock("l").Token {
		t.Fatalf("a wait ending with its session granted answered %v (holder %v, token %d)", got.Status, got.Holder, got.Token)
	}
}

// A request whose context ended is not proposed: its client gave up, and an acquire applied for
// nobody would queue or grant the session behind its back.
func TestEndedRequestIsNotProposed(t *testing.T) {
	n := newSingleNode(t)
	s := session(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := n.raft.LastIndex()
	for _, wait := range []time.Duration{0, time.Minute} {
		_, err := n.Acquire(ctx, AcquireRequest{Session: s, Lock: "l", Wait: wait})
		if !errors.Is(err, ErrNotProposed) {
			t.Fatalf("acquire (wait %v) with an ended context = %v, want ErrNotProposed", wait, err)
		}
	}
	if last := n.raft.LastIndex(); last != before || n.fsm.Lock("l").Held || n.fsm.Queued("l", s) {
		t.Fatalf("an ended request changed the log (%d -> %d) or the lock", before, last)
	}
}
