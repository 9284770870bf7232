package fsm_test

import (
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

func TestUnknownSessionIsSessionNotFound(t *testing.T) {
	ghost := sid(99)
	for _, c := range []fsm.Command{
		{Type: fsm.TypeAcquire, Session: ghost, Lock: "L"},
		{Type: fsm.TypeAcquire, Session: ghost, Lock: "L", Queue: true},
		{Type: fsm.TypeAcquire, Session: fsm.SessionID{}, Lock: "L"},
		{Type: fsm.TypeRelease, Session: ghost, Lock: "L", Token: 2},
		{Type: fsm.TypeCancelWait, Session: ghost, Lock: "L"},
		{Type: fsm.TypeDestroySession, Session: ghost},
		{Type: fsm.TypeExpireSession, Session: ghost, Now: now0},
	} {
		h := newHarness(t)
		a := sid(1)
		h.create(a)
		h.acquire(a, "L", "")
		before := snapshotBytes(t, h.f)
		h.rec.take()
		mustStatus(t, h.apply(c), fsm.StatusSessionNotFound)
		if got := snapshotBytes(t, h.f); string(got) != string(before) {
			t.Fatalf("%v by unknown session changed the state", c.Type)
		}
		if ev := h.rec.take(); len(ev) != 0 {
			t.Fatalf("%v by unknown session emitted %+v", c.Type, ev)
		}
	}
}

func TestCreateSessionRules(t *testing.T) {
	h := newHarness(t)
	a := sid(1)
	h.index = 41
	r := h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: a, Name: "worker-7", TTL: 15 * time.Second, LockDelay: 2 * time.Second})
	mustStatus(t, r, fsm.StatusOK)
	want := fsm.SessionInfo{ID: a, Name: "worker-7", TTL: 15 * time.Second, LockDelay: 2 * time.Second, CreateIndex: 42, Locks: []string{}}
	got, ok := h.f.Session(a)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("session %+v %v, want %+v", got, ok, want)
	}
	if ev := h.rec.ofKind(fsm.EventSessionCreated); len(ev) != 1 || ev[0].Session != a || ev[0].TTL != 15*time.Second || ev[0].Index != 42 {
		t.Fatalf("created events %+v", ev)
	}

	// The same id again is refused and changes nothing, not even the name or TTL.
	r = h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: a, Name: "other", TTL: time.Hour})
	mustStatus(t, r, fsm.StatusExists)
	if got, _ := h.f.Session(a); !reflect.DeepEqual(got, want) {
		t.Fatalf("duplicate create changed the session to %+v", got)
	}

	// The zero id is never valid.
	h.index++
	r = h.f.ApplyCommand(h.index, fsm.Command{Type: fsm.TypeCreateSession, TTL: time.Second})
	if r.Err == nil {
		t.Fatalf("create with zero id: %+v, want an error", r)
	}
	if n := len(h.f.Sessions()); n != 1 {
		t.Fatalf("%d sessions after refused creates, want 1", n)
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
	if got := h.rec.ofKind(fsm.EventGranted); len(got) != 1 || got[0] != (fsm.Event{Kind: fsm.EventGranted, Index: h.index, Lock: "L", Session: c, Token: h.index}) {
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
			if len(delays) != 1 || delays[0] != (fsm.Event{Kind: fsm.EventDelayStarted, Index: endIndex, Lock: "L", DelayUntil: until}) {
				t.Fatalf("delay events %+v", delays)
			}
			if got := h.f.DelayedLocks(); !reflect.DeepEqual(got, []fsm.DelayedLock{{Name: "L", Until: until}}) {
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
	h := newHarness(t)
	a := sid(1)
	h.create(a)
	h.acquire(a, "held", "")
	before := snapshotBytes(t, h.f)
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

func TestLocksListsHeldAwaitedAndDelayedByPrefix(t *testing.T) {
	h := newHarness(t)
	a, b, d := sid(1), sid(2), sid(3)
	h.create(a)
	h.create(b)
	h.createDelay(d, time.Second)
	for _, name := range []string{"jobs/b", "jobs/a", "other", "jobs/c"} {
		h.acquire(a, name, "")
	}
	h.queue(b, "jobs/b", "")
	h.acquire(d, "jobs/d", "")
	h.expire(d, now0)
	h.release(a, "jobs/c", h.f.Lock("jobs/c").Token)
	var names []string
	for _, l := range h.f.Locks("jobs/") {
		names = append(names, l.Name)
	}
	if want := []string{"jobs/a", "jobs/b", "jobs/d"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("locks %v, want %v", names, want)
	}
	if got := h.f.Locks("jobs/b")[0]; got.Waiters != 1 || got.Holder != a {
		t.Fatalf("jobs/b listed as %+v", got)
	}
	if n := len(h.f.Locks("")); n != 4 {
		t.Fatalf("%d locks in all, want 4", n)
	}
}

func TestSessionsAreSortedAndListTheirLocks(t *testing.T) {
	h := newHarness(t)
	ids := []fsm.SessionID{sid(3), sid(1), sid(2)}
	for _, id := range ids {
		h.create(id)
	}
	h.acquire(sid(2), "z", "")
	h.acquire(sid(2), "a", "")
	h.queue(sid(1), "a", "")
	got := h.f.Sessions()
	if len(got) != 3 || got[0].ID != sid(1) || got[1].ID != sid(2) || got[2].ID != sid(3) {
		t.Fatalf("sessions not sorted by id: %+v", got)
	}
	if !reflect.DeepEqual(got[1].Locks, []string{"a", "z"}) || len(got[0].Locks) != 0 {
		t.Fatalf("session locks %v and %v", got[1].Locks, got[0].Locks)
	}
	ttls := map[fsm.SessionID]time.Duration{}
	h.f.SessionTTLs(func(id fsm.SessionID, ttl time.Duration) { ttls[id] = ttl })
	if len(ttls) != 3 || ttls[sid(3)] != 10*time.Second {
		t.Fatalf("session TTLs %v", ttls)
	}
}

func TestMembershipSetAndRemove(t *testing.T) {
	h := newHarness(t)
	n1 := fsm.Member{ID: "n1", RaftAddr: "127.0.0.1:7101", HTTPAddr: "127.0.0.1:7001"}
	n2 := fsm.Member{ID: "n2", RaftAddr: "127.0.0.1:7102", HTTPAddr: "127.0.0.1:7002"}
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: n2})
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: n1})
	if got := h.f.Members(); !reflect.DeepEqual(got, []fsm.Member{n1, n2}) {
		t.Fatalf("members %+v", got)
	}
	n1b := fsm.Member{ID: "n1", RaftAddr: "10.0.0.1:7101", HTTPAddr: "10.0.0.1:7001"}
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: n1b})
	if got := h.f.Members(); !reflect.DeepEqual(got, []fsm.Member{n1b, n2}) {
		t.Fatalf("members after update %+v", got)
	}
	h.apply(fsm.Command{Type: fsm.TypeRemoveMember, Member: fsm.Member{ID: "n1"}})
	h.apply(fsm.Command{Type: fsm.TypeRemoveMember, Member: fsm.Member{ID: "unknown"}})
	if got := h.f.Members(); !reflect.DeepEqual(got, []fsm.Member{n2}) {
		t.Fatalf("members after remove %+v", got)
	}
	if ev := h.rec.ofKind(fsm.EventMembersChanged); len(ev) != 5 || ev[4].Index != 5 {
		t.Fatalf("members-changed events %+v", ev)
	}
	// Membership survives a snapshot.
	g := fsm.New(nil)
	if err := g.Restore(readCloser(snapshotBytes(t, h.f))); err != nil {
		t.Fatal(err)
	}
	if got := g.Members(); !reflect.DeepEqual(got, []fsm.Member{n2}) {
		t.Fatalf("restored members %+v", got)
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
