package fsm_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// The tests in this file each pin one rule of the lock state machine (issue 2, section 1),
// applying raw commands at explicit indexes without raft.

func TestAcquireFreeLockGrantsIt(t *testing.T) {
	h := newHarness(t)
	a := sid(1)
	h.create(a)
	r := h.acquire(a, "jobs/nightly", "host-a")
	mustStatus(t, r, fsm.StatusOK)
	if r.Token != h.index || r.Value != "host-a" {
		t.Fatalf("grant token %d value %q, want %d %q", r.Token, r.Value, h.index, "host-a")
	}
	wantLock(t, h.f, fsm.LockInfo{Name: "jobs/nightly", Held: true, Holder: a, Token: h.index, Value: "host-a", ModifyIndex: h.index})
	info, ok := h.f.Session(a)
	if !ok || !reflect.DeepEqual(info.Locks, []string{"jobs/nightly"}) {
		t.Fatalf("session %+v %v, want it to list jobs/nightly", info, ok)
	}
	if st := h.f.Stats(); st != (fsm.Stats{Sessions: 1, Locks: 1, Held: 1}) {
		t.Fatalf("stats %+v", st)
	}
}

func TestTokenIsGrantingIndex(t *testing.T) {
	// Every way a lock can be granted: a free acquire, a release's handoff, a destroy's handoff,
	// an expiry's handoff, a delay end, and an acquire that ends an elapsed delay. The token is
	// the index of that command each time, whatever the gaps between indexes.
	f := fsm.New(nil)
	ids := []fsm.SessionID{sid(1), sid(2), sid(3), sid(4), sid(5), sid(6)}
	index := uint64(100)
	apply := func(c fsm.Command) fsm.Result {
		index += 7 // indexes need not be consecutive: raft interleaves other entries
		r := f.ApplyCommand(index, c)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	}
	for i, id := range ids {
		delay := time.Duration(0)
		if i == 3 {
			delay = time.Second // the session whose expiry delays the lock
		}
		apply(fsm.Command{Type: fsm.TypeCreateSession, Session: id, TTL: time.Second, LockDelay: delay})
	}
	checkHolder := func(what string, want fsm.SessionID, token uint64) {
		t.Helper()
		l := f.Lock("L")
		if !l.Held || l.Holder != want || l.Token != token {
			t.Fatalf("%s: lock %+v, want holder %v with token %d", what, l, want, token)
		}
	}
	r := apply(fsm.Command{Type: fsm.TypeAcquire, Session: ids[0], Lock: "L", Now: now0})
	if r.Token != index {
		t.Fatalf("free acquire token %d, want %d", r.Token, index)
	}
	checkHolder("free acquire", ids[0], index)
	for _, id := range ids[1:5] {
		mustStatus(t, apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: "L", Queue: true, Now: now0}), fsm.StatusQueued)
	}
	apply(fsm.Command{Type: fsm.TypeRelease, Session: ids[0], Lock: "L", Token: r.Token})
	checkHolder("release handoff", ids[1], index)
	apply(fsm.Command{Type: fsm.TypeDestroySession, Session: ids[1]})
	checkHolder("destroy handoff", ids[2], index)
	apply(fsm.Command{Type: fsm.TypeExpireSession, Session: ids[2], Now: now0})
	checkHolder("expiry handoff", ids[3], index)
	// ids[3] has a lock-delay: its expiry delays the lock instead of handing it over.
	apply(fsm.Command{Type: fsm.TypeExpireSession, Session: ids[3], Now: now0})
	if l := f.Lock("L"); l.Held || l.DelayUntil != now0+int64(time.Second) {
		t.Fatalf("after expiry with lock-delay: %+v", l)
	}
	apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: "L", Now: now0 + int64(time.Second)})
	checkHolder("delay end", ids[4], index)
	// Delay the lock again through ids[4]... it has no lock-delay, so use a fresh session.
	apply(fsm.Command{Type: fsm.TypeCreateSession, Session: sid(7), TTL: time.Second, LockDelay: time.Second})
	apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(7), Lock: "M", Now: now0})
	apply(fsm.Command{Type: fsm.TypeExpireSession, Session: sid(7), Now: now0})
	r = apply(fsm.Command{Type: fsm.TypeAcquire, Session: ids[5], Lock: "M", Now: now0 + int64(time.Second)})
	mustStatus(t, r, fsm.StatusOK)
	if r.Token != index || f.Lock("M").Token != index {
		t.Fatalf("acquire after delay: token %d, lock %+v, want %d", r.Token, f.Lock("M"), index)
	}
}

func TestAcquireHeldLockWithoutWaitReportsHolder(t *testing.T) {
	h := newHarness(t)
	a, b := sid(1), sid(2)
	h.create(a)
	h.create(b)
	grant := h.acquire(a, "L", "va")
	before := h.f.Lock("L")
	r := h.acquire(b, "L", "vb")
	mustStatus(t, r, fsm.StatusLockHeld)
	if r.Holder != a || r.Token != grant.Token {
		t.Fatalf("lock_held reports holder %v token %d, want %v %d", r.Holder, r.Token, a, grant.Token)
	}
	wantLock(t, h.f, before) // nothing queued, nothing modified
	if got := fsm.Waiters(h.f, "L"); len(got) != 0 {
		t.Fatalf("try-acquire queued %v", got)
	}
}

func TestReleaseGrantsFirstWaiter(t *testing.T) {
	h := newHarness(t)
	a, b, c, d := sid(1), sid(2), sid(3), sid(4)
	for _, id := range []fsm.SessionID{a, b, c, d} {
		h.create(id)
	}
	grant := h.acquire(a, "L", "va")
	// Queue in an order that differs from id order, so that FIFO is not confused with sorting.
	mustStatus(t, h.queue(c, "L", "vc"), fsm.StatusQueued)
	mustStatus(t, h.queue(b, "L", "vb"), fsm.StatusQueued)
	mustStatus(t, h.queue(d, "L", ""), fsm.StatusQueued)
	h.rec.take()

	mustStatus(t, h.release(a, "L", grant.Token), fsm.StatusOK)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: c, Token: h.index, Value: "vc", Waiters: 2, ModifyIndex: h.index})
	if got := h.rec.ofKind(fsm.EventGranted); len(got) != 1 || !reflect.DeepEqual(got[0], fsm.Event{Kind: fsm.EventGranted, Index: h.index, Lock: "L", Session: c, Token: h.index}) {
		t.Fatalf("granted events %+v", got)
	}
	if info, _ := h.f.Session(a); len(info.Locks) != 0 {
		t.Fatalf("releaser still lists %v", info.Locks)
	}
	if info, _ := h.f.Session(c); !reflect.DeepEqual(info.Locks, []string{"L"}) {
		t.Fatalf("new holder lists %v", info.Locks)
	}

	tok := h.index
	mustStatus(t, h.release(c, "L", tok), fsm.StatusOK)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: b, Token: h.index, Value: "vb", Waiters: 1, ModifyIndex: h.index})
	mustStatus(t, h.release(b, "L", h.index), fsm.StatusOK)
	// d queued without a value: it is granted with an empty one, not the previous holder's.
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: d, Token: h.index, Value: "", Waiters: 0, ModifyIndex: h.index})
	mustStatus(t, h.release(d, "L", h.index), fsm.StatusOK)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", ModifyIndex: h.index})
	if st := h.f.Stats(); st != (fsm.Stats{Sessions: 4}) {
		t.Fatalf("stats after last release %+v", st)
	}
}

func TestReleaseByNonHolderChangesNothing(t *testing.T) {
	a, b := sid(1), sid(2)
	cases := []struct {
		name    string
		session fsm.SessionID
		lock    string
		token   func(grant uint64) uint64
	}{
		{"other session with the holder's token", b, "L", func(g uint64) uint64 { return g }},
		{"holder with an older token", a, "L", func(g uint64) uint64 { return g - 1 }},
		{"holder with a newer token", a, "L", func(g uint64) uint64 { return g + 1 }},
		{"holder with token zero", a, "L", func(uint64) uint64 { return 0 }},
		{"waiter with the holder's token", b, "L", func(g uint64) uint64 { return g }},
		{"lock that does not exist", a, "nope", func(g uint64) uint64 { return g }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.create(a)
			h.create(b)
			grant := h.acquire(a, "L", "va")
			if tc.name == "waiter with the holder's token" {
				h.queue(b, "L", "")
			}
			before := snapshotBytes(t, h.f)
			info := h.f.Lock("L")
			h.rec.take()
			mustStatus(t, h.release(tc.session, tc.lock, tc.token(grant.Token)), fsm.StatusNotHolder)
			wantLock(t, h.f, info)
			if got := snapshotBytes(t, h.f); string(got) != string(before) {
				t.Fatal("refused release changed the state")
			}
			if ev := h.rec.take(); len(ev) != 0 {
				t.Fatalf("refused release emitted %+v", ev)
			}
		})
	}
}

func TestReleaseTwiceIsNotHolder(t *testing.T) {
	h := newHarness(t)
	a := sid(1)
	h.create(a)
	g := h.acquire(a, "L", "")
	mustStatus(t, h.release(a, "L", g.Token), fsm.StatusOK)
	mustStatus(t, h.release(a, "L", g.Token), fsm.StatusNotHolder)
	// Re-acquired: the old token still does not release the new grant.
	g2 := h.acquire(a, "L", "")
	mustStatus(t, h.release(a, "L", g.Token), fsm.StatusNotHolder)
	if l := h.f.Lock("L"); !l.Held || l.Token != g2.Token {
		t.Fatalf("stale token released the lock: %+v", l)
	}
}

func TestReacquireByHolderKeepsTokenAndReplacesValue(t *testing.T) {
	cases := []struct {
		name      string
		cmd       fsm.Command // Session, Lock and Now are filled in
		wantValue string
		modified  bool
	}{
		{"without a value keeps the value", fsm.Command{}, "v1", false},
		{"with the same value changes nothing", fsm.Command{Value: "v1", SetValue: true}, "v1", false},
		{"with a new value replaces it", fsm.Command{Value: "v2", SetValue: true}, "v2", true},
		{"with an empty value clears it", fsm.Command{Value: "", SetValue: true}, "", true},
		{"with wait set still never queues", fsm.Command{Value: "v3", SetValue: true, Queue: true}, "v3", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, b := sid(1), sid(2)
			h.create(a)
			h.create(b)
			grant := h.acquire(a, "L", "v1")
			h.queue(b, "L", "")
			before := h.f.Lock("L")
			h.rec.take()
			c := tc.cmd
			c.Type, c.Session, c.Lock, c.Now = fsm.TypeAcquire, a, "L", now0
			r := h.apply(c)
			mustStatus(t, r, fsm.StatusOK)
			if r.Token != grant.Token || r.Value != tc.wantValue {
				t.Fatalf("re-acquire gave token %d value %q, want %d %q", r.Token, r.Value, grant.Token, tc.wantValue)
			}
			want := before
			want.Value = tc.wantValue
			if tc.modified {
				want.ModifyIndex = h.index
			}
			wantLock(t, h.f, want)
			if ws := fsm.Waiters(h.f, "L"); len(ws) != 1 || ws[0].Session != b {
				t.Fatalf("queue after re-acquire %v, want only %v", ws, b)
			}
			if ev := h.rec.ofKind(fsm.EventGranted); len(ev) != 0 {
				t.Fatalf("re-acquire announced a new grant %+v", ev)
			}
			if ev := h.rec.ofKind(fsm.EventLockChanged); (len(ev) != 0) != tc.modified {
				t.Fatalf("lock-changed events %+v, want modified=%v", ev, tc.modified)
			}
		})
	}
}

func TestQueuedSessionKeepsItsPlace(t *testing.T) {
	h := newHarness(t)
	a, b, c := sid(1), sid(2), sid(3)
	for _, id := range []fsm.SessionID{a, b, c} {
		h.create(id)
	}
	grant := h.acquire(a, "L", "")
	h.queue(b, "L", "b1")
	h.queue(c, "L", "c1")
	before := h.f.Lock("L")

	// b asks again (its waiting request was cut off): same place, newest value, nothing visible
	// changes. A retry without a value keeps the one it gave.
	r := h.queue(b, "L", "b2")
	mustStatus(t, r, fsm.StatusQueued)
	if r.Holder != a || r.Token != grant.Token {
		t.Fatalf("queued result reports holder %v token %d, want %v %d", r.Holder, r.Token, a, grant.Token)
	}
	mustStatus(t, h.queue(b, "L", ""), fsm.StatusQueued)
	wantLock(t, h.f, before)
	want := []fsm.Waiter{{Session: b, Value: "b2"}, {Session: c, Value: "c1"}}
	if got := fsm.Waiters(h.f, "L"); !reflect.DeepEqual(got, want) {
		t.Fatalf("queue %v, want %v", got, want)
	}
	if st := h.f.Stats(); st.Waiters != 2 {
		t.Fatalf("stats count %d waiters, want 2", st.Waiters)
	}

	h.release(a, "L", grant.Token)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: b, Token: h.index, Value: "b2", Waiters: 1, ModifyIndex: h.index})
}

func TestExpiryHandsLockToFirstAliveWaiter(t *testing.T) {
	for name, kind := range map[string]fsm.CommandType{"expire": fsm.TypeExpireSession, "destroy": fsm.TypeDestroySession} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			a, b, c, d := sid(1), sid(2), sid(3), sid(4)
			for _, id := range []fsm.SessionID{a, b, c, d} {
				h.create(id)
			}
			h.acquire(a, "L", "")
			h.acquire(a, "M", "")
			h.queue(b, "L", "vb")
			h.queue(c, "L", "vc")
			h.queue(d, "M", "vd")
			h.queue(c, "M", "vc")
			h.apply(fsm.Command{Type: kind, Session: b, Now: now0}) // b dies while queued
			h.rec.take()
			r := h.apply(fsm.Command{Type: kind, Session: a, Now: now0})
			mustStatus(t, r, fsm.StatusOK)
			if !reflect.DeepEqual(r.Released, []string{"L", "M"}) {
				t.Fatalf("released %v, want [L M]", r.Released)
			}
			wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: c, Token: h.index, Value: "vc", ModifyIndex: h.index})
			wantLock(t, h.f, fsm.LockInfo{Name: "M", Held: true, Holder: d, Token: h.index, Value: "vd", Waiters: 1, ModifyIndex: h.index})
			if _, ok := h.f.Session(a); ok {
				t.Fatal("ended session still exists")
			}
			ended := h.rec.ofKind(fsm.EventSessionEnded)
			if len(ended) != 1 || ended[0].Session != a || ended[0].Expired != (kind == fsm.TypeExpireSession) {
				t.Fatalf("session-ended events %+v", ended)
			}
			if err := fsm.CheckIntegrity(h.f); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestExpiryDropsDeadSessionWaits(t *testing.T) {
	h := newHarness(t)
	a, b, c := sid(1), sid(2), sid(3)
	for _, id := range []fsm.SessionID{a, b, c} {
		h.create(id)
	}
	h.acquire(a, "L", "")
	h.acquire(a, "M", "")
	h.queue(b, "L", "")
	h.queue(c, "L", "")
	h.queue(b, "M", "")
	h.rec.take()

	r := h.expire(b, now0)
	mustStatus(t, r, fsm.StatusOK)
	if len(r.Released) != 0 {
		t.Fatalf("a session that held nothing released %v", r.Released)
	}
	expIndex := h.index
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: a, Token: 4, Waiters: 1, ModifyIndex: expIndex})
	wantLock(t, h.f, fsm.LockInfo{Name: "M", Held: true, Holder: a, Token: 5, Waiters: 0, ModifyIndex: expIndex})
	if st := h.f.Stats(); st != (fsm.Stats{Sessions: 2, Locks: 2, Held: 2, Waiters: 1}) {
		t.Fatalf("stats %+v", st)
	}
	changed := map[string]bool{}
	for _, e := range h.rec.ofKind(fsm.EventLockChanged) {
		changed[e.Lock] = true
	}
	if !changed["L"] || !changed["M"] {
		t.Fatalf("lock-changed events for %v, want L and M", changed)
	}

	// Its waits are gone for good: later releases go to the next live waiter, or nobody.
	h.release(a, "M", 5)
	wantLock(t, h.f, fsm.LockInfo{Name: "M", ModifyIndex: h.index})
	h.release(a, "L", 4)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: c, Token: h.index, ModifyIndex: h.index})
	for _, e := range h.rec.ofKind(fsm.EventGranted) {
		if e.Session == b {
			t.Fatalf("dead session granted %+v", e)
		}
	}
	// A session re-created with the same id does not inherit the old waits.
	h.create(b)
	h.release(c, "L", h.f.Lock("L").Token)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", ModifyIndex: h.index})
}

func TestCancelWaitRemovesOnlyThatEntry(t *testing.T) {
	h := newHarness(t)
	a, b, c := sid(1), sid(2), sid(3)
	for _, id := range []fsm.SessionID{a, b, c} {
		h.create(id)
	}
	g := h.acquire(a, "L", "")
	h.queue(b, "L", "")
	h.queue(c, "L", "")
	r := h.cancel(b, "L")
	mustStatus(t, r, fsm.StatusCancelled)
	wantLock(t, h.f, fsm.LockInfo{Name: "L", Held: true, Holder: a, Token: g.Token, Waiters: 1, ModifyIndex: h.index})
	mustStatus(t, h.cancel(b, "L"), fsm.StatusNotQueued)
	mustStatus(t, h.cancel(b, "absent"), fsm.StatusNotQueued)
	h.release(a, "L", g.Token)
	if l := h.f.Lock("L"); l.Holder != c {
		t.Fatalf("after cancel the lock went to %v, want %v", l.Holder, c)
	}
	if info, _ := h.f.Session(b); len(info.Locks) != 0 {
		t.Fatalf("cancelled waiter holds %v", info.Locks)
	}
}

func TestCancelWaitReportsRaceWonGrant(t *testing.T) {
	h := newHarness(t)
	a, b := sid(1), sid(2)
	h.create(a)
	h.create(b)
	g := h.acquire(a, "L", "")
	h.queue(b, "L", "vb")
	h.release(a, "L", g.Token) // the grant is applied first...
	grantIndex := h.index
	before := h.f.Lock("L")
	r := h.cancel(b, "L") // ...then the wait's end: the grant is reported, not lost
	mustStatus(t, r, fsm.StatusOK)
	if r.Token != grantIndex || r.Value != "vb" {
		t.Fatalf("cancel after grant reports token %d value %q, want %d vb", r.Token, r.Value, grantIndex)
	}
	wantLock(t, h.f, before)
}

// A client that gave up a try cancels it by its attempt: a request of that try that is applied
// later (it was stranded on its way) neither grants nor queues, whatever the lock's state; other
// tries, of the session or of the same name elsewhere, are untouched.
func TestCancelledAttemptRefusesItsLaterAcquires(t *testing.T) {
	h := newHarness(t)
	a, b := sid(1), sid(2)
	h.create(a)
	h.create(b)
	try := func(id fsm.SessionID, lock, attempt string, queue bool) fsm.Result {
		return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: lock, Queue: queue, Attempt: attempt, Now: now0})
	}
	cancel := func(id fsm.SessionID, lock, attempt string) fsm.Result {
		return h.apply(fsm.Command{Type: fsm.TypeCancelWait, Session: id, Lock: lock, Attempt: attempt})
	}
	// Cancelled before its request was applied: the lock is free, yet the late request fails.
	mustStatus(t, cancel(b, "L", "b1"), fsm.StatusNotQueued)
	before := h.f.Lock("L")
	mustStatus(t, try(b, "L", "b1", true), fsm.StatusAttemptCancelled)
	mustStatus(t, try(b, "L", "b1", false), fsm.StatusAttemptCancelled)
	wantLock(t, h.f, before)
	// A new try of the same session, and the same attempt name for another lock, go ahead.
	g := try(b, "L", "b2", false)
	mustStatus(t, g, fsm.StatusOK)
	mustStatus(t, try(b, "M", "b1", false), fsm.StatusOK)
	// Cancelling while queued removes the entry; the try's next chunk does not rejoin.
	mustStatus(t, try(a, "L", "a1", true), fsm.StatusQueued)
	mustStatus(t, cancel(a, "L", "a1"), fsm.StatusCancelled)
	mustStatus(t, try(a, "L", "a1", true), fsm.StatusAttemptCancelled)
	// A grant that came first is reported by the cancel and not undone; the try stays fenced
	// while the session holds the lock.
	mustStatus(t, try(a, "L", "a3", true), fsm.StatusQueued)
	h.release(b, "L", g.Token)
	r := cancel(a, "L", "a3")
	mustStatus(t, r, fsm.StatusOK)
	if l := h.f.Lock("L"); !l.Held || l.Holder != a || l.Token != r.Token {
		t.Fatalf("after the cancel the lock is %+v, want held by a under %d", l, r.Token)
	}
	mustStatus(t, try(a, "L", "a3", true), fsm.StatusAttemptCancelled)
	// A plain acquire, without an attempt, keeps the idempotent re-acquire of docs/api.md.
	mustStatus(t, h.acquire(a, "L", ""), fsm.StatusOK)
}

// A release that names the attempt which won the lock fences it: a request of that try that
// is applied after the release (it was stranded on its way) neither grants nor queues, so the
// session cannot hold the lock again without knowing it. A release that fails still fences.
func TestReleaseFencesTheAttemptThatWon(t *testing.T) {
	h := newHarness(t)
	a, b := sid(1), sid(2)
	h.create(a)
	h.create(b)
	try := func(id fsm.SessionID, attempt string, queue bool) fsm.Result {
		return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: "L", Queue: queue, Attempt: attempt, Now: now0})
	}
	g := try(a, "a1", false)
	mustStatus(t, g, fsm.StatusOK)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeRelease, Session: a, Lock: "L", Token: g.Token, Attempt: "a1"}), fsm.StatusOK)
	before := h.f.Lock("L")
	mustStatus(t, try(a, "a1", false), fsm.StatusAttemptCancelled)
	mustStatus(t, try(a, "a1", true), fsm.StatusAttemptCancelled)
	wantLock(t, h.f, before)
	// Another holder now: a stale release with another attempt is refused and fences that one.
	gb := try(b, "b1", false)
	mustStatus(t, gb, fsm.StatusOK)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeRelease, Session: a, Lock: "L", Token: g.Token, Attempt: "a2"}), fsm.StatusNotHolder)
	mustStatus(t, try(a, "a2", true), fsm.StatusAttemptCancelled)
	if l := h.f.Lock("L"); l.Holder != b || l.Waiters != 0 {
		t.Fatalf("lock after the fenced tries: %+v", l)
	}
	// A new try of the session still queues.
	mustStatus(t, try(a, "a3", true), fsm.StatusQueued)
}

// A session remembers its last maxFences (16) cancelled attempts; the oldest goes first.
func TestSessionKeepsItsLastSixteenCancelledAttempts(t *testing.T) {
	h := newHarness(t)
	a := sid(1)
	h.create(a)
	for i := range 17 {
		h.apply(fsm.Command{Type: fsm.TypeCancelWait, Session: a, Lock: "L", Attempt: fmt.Sprint("t", i)})
	}
	try := func(attempt string) fsm.Status {
		r := h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "L", Attempt: attempt, Now: now0})
		if r.Status == fsm.StatusOK {
			h.release(a, "L", r.Token)
		}
		return r.Status
	}
	for i := 1; i < 17; i++ {
		if st := try(fmt.Sprint("t", i)); st != fsm.StatusAttemptCancelled {
			t.Fatalf("attempt t%d: %v, want attempt_cancelled", i, st)
		}
	}
	if st := try("t0"); st != fsm.StatusOK {
		t.Fatalf("the oldest attempt t0: %v, want it forgotten", st)
	}
}

func TestAbsentLockReportsFreedIndex(t *testing.T) {
	h := newHarness(t)
	a := sid(1)
	h.create(a)
	wantLock(t, h.f, fsm.LockInfo{Name: "never"})
	g := h.acquire(a, "L", "")
	wantLock(t, h.f, fsm.LockInfo{Name: "never"}) // a grant removes no entry
	h.release(a, "L", g.Token)
	freed := h.index
	// Both the freed lock and one never used report the index of the last removal, so that
	// a blocking query that missed the removal wakes up.
	wantLock(t, h.f, fsm.LockInfo{Name: "L", ModifyIndex: freed})
	wantLock(t, h.f, fsm.LockInfo{Name: "never", ModifyIndex: freed})
	if got := h.f.Locks(""); len(got) != 0 {
		t.Fatalf("free lock listed: %+v", got)
	}
	// A lock's modify index never goes backwards as it comes and goes.
	last := freed
	for i := 0; i < 3; i++ {
		g := h.acquire(a, "L", "")
		if m := h.f.Lock("L").ModifyIndex; m <= last {
			t.Fatalf("modify index %d after %d", m, last)
		}
		h.release(a, "L", g.Token)
		if m := h.f.Lock("L").ModifyIndex; m <= last {
			t.Fatalf("modify index %d after %d", m, last)
		}
		last = h.f.Lock("L").ModifyIndex
	}
	// Try-acquires and refused commands do not move it.
	b := sid(2)
	h.create(b)
	g = h.acquire(a, "L", "")
	h.acquire(b, "L", "")
	h.release(b, "L", g.Token)
	if m := h.f.Lock("L").ModifyIndex; m != g.Token {
		t.Fatalf("modify index %d moved from %d without a change", m, g.Token)
	}
}
