package fsm_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Lock-delay: after a session expires (not after a release or destroy), its locks stay
// unavailable until the time the leader wrote into the expiry plus the session's LockDelay.

func TestLockDelayAfterExpiryNotAfterDestroyOrRelease(t *testing.T) {
	const delay = 3 * time.Second
	const at = now0 + 5_000
	cases := []struct {
		name    string
		lockDel time.Duration
		end     func(h *harness, id fsm.SessionID, token uint64)
		delayed bool
	}{
		{"expiry with lock-delay", delay, func(h *harness, id fsm.SessionID, _ uint64) { h.expire(id, at) }, true},
		{"expiry without lock-delay", 0, func(h *harness, id fsm.SessionID, _ uint64) { h.expire(id, at) }, false},
		{"destroy with lock-delay", delay, func(h *harness, id fsm.SessionID, _ uint64) { h.destroy(id) }, false},
		{"release with lock-delay", delay, func(h *harness, id fsm.SessionID, tok uint64) { h.release(id, "L", tok) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, b := sid(1), sid(2)
			h.createDelay(a, tc.lockDel)
			h.create(b)
			g := h.acquire(a, "L", "")
			h.rec.take()
			tc.end(h, a, g.Token)
			endIndex := h.index
			delays := h.rec.ofKind(fsm.EventDelayStarted)
			if !tc.delayed {
				if len(delays) != 0 || len(h.f.DelayedLocks()) != 0 {
					t.Fatalf("delay started: events %+v, delayed %v", delays, h.f.DelayedLocks())
				}
				wantLock(t, h.f, fsm.LockInfo{Name: "L", ModifyIndex: endIndex})
				mustStatus(t, h.acquire(b, "L", ""), fsm.StatusOK)
				return
			}
			until := at + int64(delay)
			if len(delays) != 1 || !reflect.DeepEqual(delays[0], fsm.Event{Kind: fsm.EventDelayStarted, Index: endIndex, Lock: "L", DelayUntil: until, Delay: delay}) {
				t.Fatalf("delay events %+v", delays)
			}
			if got := h.f.DelayedLocks(); !reflect.DeepEqual(got, []fsm.DelayedLock{{Name: "L", Until: until, Length: delay}}) {
				t.Fatalf("delayed locks %+v", got)
			}
			wantLock(t, h.f, fsm.LockInfo{Name: "L", ModifyIndex: endIndex, DelayUntil: until})
			// Refused until the leader's clock, as written in the command, reaches the end.
			r := h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Now: until - 1})
			mustStatus(t, r, fsm.StatusLockDelayed)
			if r.DelayUntil != until {
				t.Fatalf("delayed until %d, want %d", r.DelayUntil, until)
			}
			wantLock(t, h.f, fsm.LockInfo{Name: "L", ModifyIndex: endIndex, DelayUntil: until})
			r = h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Now: until})
			mustStatus(t, r, fsm.StatusOK)
			wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: b, Token: h.index, ModifyIndex: h.index})
			if len(h.f.DelayedLocks()) != 0 {
				t.Fatalf("delay still listed: %v", h.f.DelayedLocks())
			}
		})
	}
}

// delayedWithWaiters builds a lock "L" under lock-delay until the returned time, with b then
// c queued.
func delayedWithWaiters(t *testing.T) (h *harness, b, c fsm.SessionID, until int64) {
	h = newHarness(t)
	a := sid(1)
	b, c = sid(2), sid(3)
	h.createDelay(a, time.Second)
	h.create(b)
	h.create(c)
	h.acquire(a, "L", "")
	h.queue(b, "L", "vb")
	h.queue(c, "L", "vc")
	h.expire(a, now0)
	until = now0 + int64(time.Second)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Waiters: 2, ModifyIndex: h.index, DelayUntil: until})
	if ev := h.rec.ofKind(fsm.EventGranted); len(ev) != 1 {
		t.Fatalf("grant during delayed expiry: %+v", ev)
	}
	return h, b, c, until
}

func TestDelayEndedGrantsFirstWaiter(t *testing.T) {
	h, b, _, until := delayedWithWaiters(t)
	h.rec.take()
	mustStatus(t, h.delayEnded("L", until+10), fsm.StatusOK)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: b, Token: h.index, Value: "vb", Waiters: 1, ModifyIndex: h.index})
	if ev := h.rec.ofKind(fsm.EventGranted); len(ev) != 1 || ev[0].Session != b || ev[0].Token != h.index {
		t.Fatalf("granted events %+v", ev)
	}
	if len(h.f.DelayedLocks()) != 0 {
		t.Fatalf("delay still listed: %v", h.f.DelayedLocks())
	}
	// A second delay end (a retried timer) changes nothing.
	before := h.f.Lock("L")
	mustStatus(t, h.delayEnded("L", until+20), fsm.StatusOK)
	wantLock(t, h.f, before)
}

func TestDelayEndedBeforeTimeIsRefused(t *testing.T) {
	h, _, _, until := delayedWithWaiters(t)
	before := h.f.Lock("L")
	snap := snapshotBytes(t, h.f)
	r := h.delayEnded("L", until-1)
	mustStatus(t, r, fsm.StatusLockDelayed)
	if r.DelayUntil != until {
		t.Fatalf("refusal reports %d, want %d", r.DelayUntil, until)
	}
	wantLock(t, h.f, before)
	if string(snapshotBytes(t, h.f)) != string(snap) {
		t.Fatal("refused delay end changed the state")
	}
}

func TestDelayEndedOnLockWithoutDelayDoesNothing(t *testing.T) {
	h, _, before := oneHolder(t, "held", "")
	mustStatus(t, h.delayEnded("held", now0), fsm.StatusOK)
	mustStatus(t, h.delayEnded("absent", now0), fsm.StatusOK)
	if string(snapshotBytes(t, h.f)) != string(before) {
		t.Fatal("delay end without a delay changed the state")
	}
}

func TestAcquireAfterDelayTimeGrantsInQueueOrder(t *testing.T) {
	// The delay is over on the leader's clock but its DelayEnded has not been applied: an
	// acquire by someone who was not waiting must not jump the queue.
	h, b, c, until := delayedWithWaiters(t)
	d := sid(4)
	h.create(d)
	r := h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: d, Lock: "L", Now: until})
	mustStatus(t, r, fsm.StatusLockHeld)
	if r.Holder != b || r.Token != h.index {
		t.Fatalf("lock_held reports %v %d, want %v %d", r.Holder, r.Token, b, h.index)
	}
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: b, Token: h.index, Value: "vb", Waiters: 1, ModifyIndex: h.index})

	// And a waiter asking again after the delay is served in order too: c is second, so it
	// stays queued; once b leaves it is next.
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: c, Lock: "L", Queue: true, Now: until}), fsm.StatusQueued)
	h.release(b, "L", h.f.Lock("L").Token)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: c, Token: h.index, Value: "vc", ModifyIndex: h.index})
}

func TestFirstWaiterAcquiringAfterDelayTimeIsGranted(t *testing.T) {
	h, b, _, until := delayedWithWaiters(t)
	r := h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Value: "new", SetValue: true, Now: until + 1})
	mustStatus(t, r, fsm.StatusOK)
	if r.Token != h.index || r.Value != "new" {
		t.Fatalf("grant %+v, want token %d value new", r, h.index)
	}
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: b, Token: h.index, Value: "new", Waiters: 1, ModifyIndex: h.index})
}

func TestQueueOnDelayedLockReportsDelay(t *testing.T) {
	h, _, _, until := delayedWithWaiters(t)
	d := sid(4)
	h.create(d)
	r := h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: d, Lock: "L", Queue: true, Now: until - 1})
	mustStatus(t, r, fsm.StatusQueued)
	if r.DelayUntil != until || !r.Holder.IsZero() || r.Token != 0 {
		t.Fatalf("queued on delayed lock reports %+v", r)
	}
	if got := h.f.Lock("L"); got.Waiters != 3 {
		t.Fatalf("waiters %d, want 3", got.Waiters)
	}
}

func TestLockDelayEndingAtClockZeroStillDelays(t *testing.T) {
	// DelayUntil 0 means "no delay". A leader clock reading of exactly -LockDelay (nonsense for
	// a real clock, possible in a command) must still delay the lock and later grant its
	// waiter, not leave it free with a queue that nothing grants.
	h := newHarness(t)
	a, b := sid(1), sid(2)
	h.createDelay(a, time.Second)
	h.create(b)
	h.acquire(a, "L", "")
	h.queue(b, "L", "")
	h.expire(a, -int64(time.Second))
	l := h.f.Lock("L")
	if l.Held || l.DelayUntil == 0 || l.Waiters != 1 || len(h.f.DelayedLocks()) != 1 {
		t.Fatalf("after expiry: %+v, delayed %v", l, h.f.DelayedLocks())
	}
	if err := fsm.CheckIntegrity(h.f); err != nil {
		t.Fatal(err)
	}
	r := fsm.New(nil)
	if err := r.Restore(readCloser(snapshotBytes(t, h.f))); err != nil {
		t.Fatalf("its own snapshot is refused: %v", err)
	}
	mustStatus(t, h.delayEnded("L", l.DelayUntil), fsm.StatusOK)
	if l := h.f.Lock("L"); l.Holder != b {
		t.Fatalf("after the delay: %+v", l)
	}
}

// Leaders write no clock reading into acquires: such an acquire never ends a delay, however
// late it comes, and leaves that to the DelayEnded the leader proposes after the full delay.
func TestAcquireWithoutAClockReadingNeverEndsADelay(t *testing.T) {
	h, b, _, until := delayedWithWaiters(t)
	d := sid(4)
	h.create(d)
	for _, c := range []fsm.Command{
		{Type: fsm.TypeAcquire, Session: d, Lock: "L"},
		{Type: fsm.TypeAcquire, Session: b, Lock: "L"},
	} {
		r := h.apply(c)
		mustStatus(t, r, fsm.StatusLockDelayed)
		if r.DelayUntil != until {
			t.Fatalf("delayed until %d, want %d", r.DelayUntil, until)
		}
	}
	if got := h.f.DelayedLocks(); len(got) != 1 || got[0].Until != until || got[0].Length != time.Second {
		t.Fatalf("delayed locks %+v", got)
	}
	mustStatus(t, h.delayEnded("L", until), fsm.StatusOK)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: b, Token: h.index, Value: "vb", Waiters: 1, ModifyIndex: h.index})
}
