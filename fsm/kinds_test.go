package fsm_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// kindHarness returns a harness with semaphores-rwlocks enabled and sessions 1 to n, those
// from delayFrom on with a lock-delay of a second.
func kindHarness(t *testing.T, n, delayFrom int) *harness {
	t.Helper()
	h := newHarness(t)
	mustStatus(t, h.apply(enable(fsm.FeatureSemaphoresRWLocks)), fsm.StatusOK)
	for i := 1; i <= n; i++ {
		if delayFrom > 0 && i >= delayFrom {
			h.createDelay(sid(i), time.Second)
		} else {
			h.create(sid(i))
		}
	}
	return h
}

// sem applies an acquire of a semaphore of the given limit.
func (h *harness) sem(id fsm.SessionID, lock string, limit uint32, queue bool) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: lock, Limit: limit, Queue: queue})
}

// rw applies an acquire of a shared or exclusive hold.
func (h *harness) rw(id fsm.SessionID, lock string, shared, queue bool) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: lock, Shared: shared, Queue: queue})
}

// holders returns the sessions holding lock, oldest grant first.
func holders(f *fsm.FSM, lock string) []fsm.SessionID {
	var out []fsm.SessionID
	for _, h := range f.Holders(lock) {
		out = append(out, h.Session)
	}
	return out
}

func wantHolders(t *testing.T, f *fsm.FSM, lock string, want ...fsm.SessionID) {
	t.Helper()
	if got := holders(f, lock); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s held by %v, want %v", lock, got, want)
	}
}

// Up to N sessions hold a semaphore at once, each under its own token; the next one is refused
// (naming the newest holder) or queues, in FIFO order, and each release hands its permit to
// the next waiter in the same command.
func TestSemaphoreGrantsUpToItsLimit(t *testing.T) {
	h := kindHarness(t, 5, 0)
	var tokens []uint64
	for i := 1; i <= 3; i++ {
		r := h.sem(sid(i), "S", 3, false)
		mustStatus(t, r, fsm.StatusOK)
		if r.Token != r.Index {
			t.Fatalf("permit %d token %d at index %d", i, r.Token, r.Index)
		}
		tokens = append(tokens, r.Token)
	}
	r := h.sem(sid(4), "S", 3, false)
	if r.Status != fsm.StatusLockHeld || r.Holder != sid(3) || r.Token != tokens[2] {
		t.Fatalf("fourth try: %+v, want lock_held naming the newest holder", r)
	}
	mustStatus(t, h.sem(sid(4), "S", 3, true), fsm.StatusQueued)
	mustStatus(t, h.sem(sid(5), "S", 3, true), fsm.StatusQueued)
	wantLock(t, h.f, fsm.LockInfo{Name: "S", Held: true, Holder: sid(3), Token: tokens[2], Waiters: 2, ModifyIndex: h.index, Limit: 3})
	h.rec.take()
	rel := h.release(sid(2), "S", tokens[1])
	mustStatus(t, rel, fsm.StatusOK)
	if g := h.rec.ofKind(fsm.EventGranted); len(g) != 1 || g[0].Session != sid(4) || g[0].Token != rel.Index {
		t.Fatalf("release granted %+v, want session 4 under token %d", g, rel.Index)
	}
	wantHolders(t, h.f, "S", sid(1), sid(3), sid(4))
	// The permit of an ended session goes on too.
	h.destroy(sid(1))
	wantHolders(t, h.f, "S", sid(3), sid(4), sid(5))
	if got := h.f.Lock("S").Waiters; got != 0 {
		t.Fatalf("%d waiters left", got)
	}
}

// The limit is fixed by the first acquire while the lock has holders, waiters or delays; an
// acquire with another (a plain acquire is limit 1) is refused and changes nothing. Once the
// lock is idle, the next acquire sets it again.
func TestSemaphoreLimitIsFixedWhileInUse(t *testing.T) {
	h := kindHarness(t, 3, 3)
	r := h.sem(sid(1), "S", 2, false)
	mustStatus(t, r, fsm.StatusOK)
	before := snapshotBytes(t, h.f)
	for _, c := range []fsm.Command{
		{Type: fsm.TypeAcquire, Session: sid(2), Lock: "S", Limit: 3},
		{Type: fsm.TypeAcquire, Session: sid(2), Lock: "S"},
		{Type: fsm.TypeAcquire, Session: sid(2), Lock: "S", Limit: 1, Queue: true},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "S", Limit: 5},
		{Type: fsm.TypeAcquire, Session: sid(2), Lock: "S", Shared: true},
	} {
		if got := h.apply(c); got.Status != fsm.StatusLimitMismatch || got.Limit != 2 {
			t.Fatalf("%+v: %+v, want limit_mismatch naming 2", c, got)
		}
	}
	if string(snapshotBytes(t, h.f)) != string(before) {
		t.Fatal("a refused limit changed the state")
	}
	// A plain lock is a semaphore of one.
	mustStatus(t, h.rw(sid(1), "L", false, false), fsm.StatusOK)
	if got := h.sem(sid(2), "L", 2, false); got.Status != fsm.StatusLimitMismatch || got.Limit != 1 {
		t.Fatalf("limit 2 on a lock: %+v", got)
	}
	mustStatus(t, h.sem(sid(2), "L", 1, true), fsm.StatusQueued)
	// A delay keeps the limit fixed: the permit it holds back is one of the limit's.
	mustStatus(t, h.sem(sid(3), "S", 2, false), fsm.StatusOK)
	h.release(sid(1), "S", r.Token)
	h.expire(sid(3), now0)
	if l := h.f.Lock("S"); l.Held || l.DelayUntil == 0 || l.Limit != 2 {
		t.Fatalf("after the expiry: %+v", l)
	}
	mustStatus(t, h.sem(sid(2), "S", 4, false), fsm.StatusLimitMismatch)
	for _, d := range h.f.DelayedLocks() {
		h.apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: d.Name, Now: d.Until, DelayIndex: d.Index})
	}
	mustStatus(t, h.sem(sid(2), "S", 4, false), fsm.StatusOK)
	if l := h.f.Lock("S"); l.Limit != 4 {
		t.Fatalf("the idle lock kept limit %d", l.Limit)
	}
}

// Limits outside 1..MaxLimit, and a shared hold of a semaphore, are refused as invalid.
func TestInvalidKindsAreRefused(t *testing.T) {
	h := kindHarness(t, 1, 0)
	before := snapshotBytes(t, h.f)
	for _, c := range []fsm.Command{
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "S", Limit: fsm.MaxLimit + 1},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "S", Limit: 2, Shared: true},
	} {
		mustStatus(t, h.apply(c), fsm.StatusInvalid)
	}
	if string(snapshotBytes(t, h.f)) != string(before) {
		t.Fatal("an invalid acquire changed the state")
	}
	mustStatus(t, h.sem(sid(1), "S", fsm.MaxLimit, false), fsm.StatusOK)
}

// A session holds a semaphore once: its second acquire answers its grant (with a new value if
// it brought one), and a queued session keeps its place.
func TestSemaphoreReacquireIsIdempotent(t *testing.T) {
	h := kindHarness(t, 3, 0)
	first := h.sem(sid(1), "S", 2, false)
	h.sem(sid(2), "S", 2, false)
	again := h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(2), Lock: "S", Limit: 2, Value: "new", SetValue: true})
	if again.Status != fsm.StatusOK || again.Token != first.Token+1 || again.Value != "new" {
		t.Fatalf("re-acquire: %+v", again)
	}
	if hs := h.f.Holders("S"); len(hs) != 2 || hs[1].Value != "new" {
		t.Fatalf("holders %+v", hs)
	}
	h.sem(sid(3), "S", 2, true)
	mustStatus(t, h.sem(sid(3), "S", 2, true), fsm.StatusQueued)
	if n := h.f.Lock("S").Waiters; n != 1 {
		t.Fatalf("%d waiters after asking twice", n)
	}
}

// After an expiry, a lock-delay holds that permit back; the other permits stay usable. A
// DelayEnded that names a delay ends that one only, however its clock compares with the
// others' ends.
func TestSemaphoreDelayHoldsBackOnePermit(t *testing.T) {
	h := kindHarness(t, 4, 1)
	h.sem(sid(1), "S", 2, false)
	h.sem(sid(2), "S", 2, false)
	h.expire(sid(1), now0+int64(time.Hour)) // a leader whose clock is an hour ahead
	h.rec.take()
	h.expire(sid(2), now0)
	d := h.rec.ofKind(fsm.EventDelayStarted)
	if len(d) != 1 || d[0].DelayIndex != h.index || d[0].DelayUntil != now0+int64(time.Second) {
		t.Fatalf("delay events %+v", d)
	}
	delays := h.f.DelayedLocks()
	if len(delays) != 2 || delays[0].Index >= delays[1].Index {
		t.Fatalf("delays %+v", delays)
	}
	mustStatus(t, h.sem(sid(3), "S", 2, false), fsm.StatusLockDelayed)
	mustStatus(t, h.sem(sid(3), "S", 2, true), fsm.StatusQueued)
	// Ending the second delay must not end the first, though its end is earlier by a clock
	// reading past both.
	r := h.apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: "S", Now: now0 + int64(2*time.Hour), DelayIndex: delays[1].Index})
	mustStatus(t, r, fsm.StatusOK)
	wantHolders(t, h.f, "S", sid(3))
	if left := h.f.DelayedLocks(); len(left) != 1 || left[0].Index != delays[0].Index {
		t.Fatalf("delays left %+v", left)
	}
	mustStatus(t, h.sem(sid(4), "S", 2, false), fsm.StatusLockHeld)
	// Too early for the one named, and naming one that ended, change nothing.
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: "S", Now: now0, DelayIndex: delays[0].Index}), fsm.StatusLockDelayed)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: "S", Now: now0 + int64(2*time.Hour), DelayIndex: delays[1].Index}), fsm.StatusOK)
	if len(h.f.DelayedLocks()) != 1 {
		t.Fatal("a DelayEnded naming an ended delay ended another")
	}
}

// Shared holds coexist; an exclusive one excludes every other; a waiting writer stops later
// readers from overtaking it; the writer's release grants the first reader in the same
// command and each further one in a ServeQueue of its own, each under its own token.
func TestReadWriteLockIsFIFOWithoutStarvation(t *testing.T) {
	h := kindHarness(t, 5, 0)
	r1 := h.rw(sid(1), "R", true, false)
	r2 := h.rw(sid(2), "R", true, false)
	if r1.Status != fsm.StatusOK || r2.Status != fsm.StatusOK || r1.Token == r2.Token {
		t.Fatalf("two readers: %+v, %+v", r1, r2)
	}
	if l := h.f.Lock("R"); !l.Shared || l.Holder != sid(2) || l.Token != r2.Token {
		t.Fatalf("read-held lock reads as %+v", l)
	}
	if got := h.rw(sid(3), "R", false, false); got.Status != fsm.StatusLockHeld || got.Holder != sid(2) {
		t.Fatalf("writer beside readers: %+v", got)
	}
	mustStatus(t, h.rw(sid(3), "R", false, true), fsm.StatusQueued)
	// A reader that comes after the waiting writer waits behind it.
	mustStatus(t, h.rw(sid(4), "R", true, false), fsm.StatusLockHeld)
	mustStatus(t, h.rw(sid(4), "R", true, true), fsm.StatusQueued)
	mustStatus(t, h.rw(sid(5), "R", true, true), fsm.StatusQueued)
	h.release(sid(1), "R", r1.Token)
	wantHolders(t, h.f, "R", sid(2))
	h.rec.take()
	h.release(sid(2), "R", r2.Token)
	wantHolders(t, h.f, "R", sid(3))
	if l := h.f.Lock("R"); l.Shared || l.Waiters != 2 {
		t.Fatalf("write-held lock reads as %+v", l)
	}
	w := h.f.Holders("R")[0].Token
	mustStatus(t, h.rw(sid(1), "R", true, false), fsm.StatusLockHeld)
	h.rec.take()
	rel := h.release(sid(3), "R", w)
	wantHolders(t, h.f, "R", sid(4))
	if ready := h.rec.ofKind(fsm.EventQueueReady); len(ready) != 1 || ready[0].Lock != "R" {
		t.Fatalf("the release left a reader waiting and said %+v", ready)
	}
	if got := h.f.ReadyQueues(); !reflect.DeepEqual(got, []string{"R"}) || h.f.Ready("R") != 1 {
		t.Fatalf("ready queues %v, %d ready", got, h.f.Ready("R"))
	}
	serve := h.apply(fsm.Command{Type: fsm.TypeServeQueue, Lock: "R"})
	mustStatus(t, serve, fsm.StatusOK)
	hs := h.f.Holders("R")
	if len(hs) != 2 || hs[0].Token != rel.Index || hs[1].Token != serve.Index || hs[1].Session != sid(5) {
		t.Fatalf("after serving: %+v", hs)
	}
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeServeQueue, Lock: "R"}), fsm.StatusNotQueued)
	if len(h.f.ReadyQueues()) != 0 {
		t.Fatal("a served queue still ready")
	}
}

// Cancelling a waiting writer (or ending its session) lets the readers behind it in.
func TestCancelledWriterLetsReadersIn(t *testing.T) {
	h := kindHarness(t, 4, 0)
	h.rw(sid(1), "R", true, false)
	h.rw(sid(2), "R", false, true)
	h.rw(sid(3), "R", true, true)
	h.rw(sid(4), "R", true, true)
	h.rec.take()
	mustStatus(t, h.cancel(sid(2), "R"), fsm.StatusCancelled)
	wantHolders(t, h.f, "R", sid(1), sid(3))
	if ready := h.rec.ofKind(fsm.EventQueueReady); len(ready) != 1 {
		t.Fatalf("queue ready events %+v", ready)
	}
	h.apply(fsm.Command{Type: fsm.TypeServeQueue, Lock: "R"})
	wantHolders(t, h.f, "R", sid(1), sid(3), sid(4))
}

// A session has one place per lock: an acquire in the other mode than its hold or its queue
// entry is refused and changes nothing; in the same mode it is idempotent.
func TestModeMismatchIsRefused(t *testing.T) {
	h := kindHarness(t, 3, 0)
	w := h.rw(sid(1), "R", false, false)
	h.rw(sid(2), "R", true, true)
	before := snapshotBytes(t, h.f)
	mustStatus(t, h.rw(sid(1), "R", true, false), fsm.StatusModeMismatch)
	mustStatus(t, h.rw(sid(2), "R", false, true), fsm.StatusModeMismatch)
	mustStatus(t, h.rw(sid(2), "R", false, false), fsm.StatusModeMismatch)
	if string(snapshotBytes(t, h.f)) != string(before) {
		t.Fatal("a refused mode changed the state")
	}
	if again := h.rw(sid(1), "R", false, false); again.Status != fsm.StatusOK || again.Token != w.Token {
		t.Fatalf("same mode again: %+v", again)
	}
	mustStatus(t, h.rw(sid(2), "R", true, true), fsm.StatusQueued)
}

// A shared holder's expiry delays writers but not readers; a writer's delays everyone.
func TestSharedDelayHoldsBackWritersOnly(t *testing.T) {
	h := kindHarness(t, 4, 1)
	h.rw(sid(1), "R", true, false)
	h.expire(sid(1), now0)
	if l := h.f.Lock("R"); l.Held || !l.Shared || l.DelayUntil == 0 {
		t.Fatalf("after a reader's expiry: %+v", l)
	}
	mustStatus(t, h.rw(sid(2), "R", false, false), fsm.StatusLockDelayed)
	mustStatus(t, h.rw(sid(3), "R", true, false), fsm.StatusOK)

	h.rw(sid(2), "W", false, false)
	h.expire(sid(2), now0)
	mustStatus(t, h.rw(sid(3), "W", true, false), fsm.StatusLockDelayed)
	mustStatus(t, h.rw(sid(4), "W", false, false), fsm.StatusLockDelayed)
}

// Numbered attempts work for every kind of hold: a release of a semaphore's permit or of a
// shared hold fences its attempt, so a late request of it neither queues nor grants.
func TestAttemptsFenceEveryKindOfHold(t *testing.T) {
	h := kindHarness(t, 2, 0)
	h.apply(enable(fsm.FeatureAttemptNumbers))
	for _, c := range []fsm.Command{
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "S", Limit: 2, AttemptSeq: 1},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "R", Shared: true, AttemptSeq: 2},
	} {
		r := h.apply(c)
		mustStatus(t, r, fsm.StatusOK)
		mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeRelease, Session: sid(1), Lock: c.Lock, Token: r.Token, AttemptSeq: c.AttemptSeq}), fsm.StatusOK)
		late := c
		late.Queue = true
		mustStatus(t, h.apply(late), fsm.StatusAttemptCancelled)
		if l := h.f.Lock(c.Lock); l.Held || l.Waiters != 0 {
			t.Fatalf("a late request of a released attempt took %+v", l)
		}
	}
}

// Until the feature is enabled, a limit, a shared hold and a delay's name are ignored (no
// leader proposes them before), so that every node applies such an entry alike; and a node
// that lacks the feature stops on an entry that uses it.
func TestKindsNeedTheirFeature(t *testing.T) {
	h := newHarness(t)
	h.create(sid(1))
	h.create(sid(2))
	mustStatus(t, h.sem(sid(1), "S", 3, false), fsm.StatusOK)
	if l := h.f.Lock("S"); l.Limit != 0 {
		t.Fatalf("a limit applied before its feature: %+v", l)
	}
	mustStatus(t, h.rw(sid(2), "S", true, false), fsm.StatusLockHeld)
	entries := map[string]fsm.Command{
		"enable":      enable(fsm.FeatureSemaphoresRWLocks),
		"limit":       {Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Limit: 2},
		"shared":      {Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Shared: true},
		"named delay": {Type: fsm.TypeDelayEnded, Lock: "L", DelayIndex: 3},
		"serve queue": {Type: fsm.TypeServeQueue, Lock: "L"},
	}
	for name, c := range entries {
		t.Run(name, func(t *testing.T) {
			others := []fsm.Feature{fsm.FeatureAttemptNumbers, fsm.FeatureExpiryTerm, fsm.FeatureTokenDeleteDropsWaits}
			old := fsm.New(nil, fsm.WithFeatures(others...))
			old.ApplyCommand(1, fsm.Command{Type: fsm.TypeCreateSession, Session: sid(1), TTL: time.Second})
			mustHalt(t, old, 2, c.Encode(nil))
			if !strings.Contains(old.Halted().Error(), string(fsm.FeatureSemaphoresRWLocks)) {
				t.Fatalf("halted: %v, want it to name %s", old.Halted(), fsm.FeatureSemaphoresRWLocks)
			}
		})
	}
	// The command says which feature it misses.
	c := fsm.Command{Type: fsm.TypeAcquire, Lock: "L", Limit: 2, AttemptSeq: 1}
	none := func(fsm.Feature) bool { return false }
	only := func(f fsm.Feature) bool { return f == fsm.FeatureAttemptNumbers }
	if got := c.MissingFeature(none); got != fsm.FeatureAttemptNumbers {
		t.Fatalf("missing %q", got)
	}
	if got := c.MissingFeature(only); got != fsm.FeatureSemaphoresRWLocks {
		t.Fatalf("missing %q", got)
	}
	if got := (&fsm.Command{Type: fsm.TypeAcquire, Lock: "L", Limit: 2}).MissingFeature(func(fsm.Feature) bool { return true }); got != "" {
		t.Fatalf("missing %q with every feature", got)
	}
}

// Every grant of a lock has its own token, however many waiters one command frees: a semaphore
// whose delays all end together grants one waiter, and the rest by ServeQueue.
func TestOneGrantPerLockPerCommand(t *testing.T) {
	h := kindHarness(t, 6, 1)
	for i := 1; i <= 3; i++ {
		h.sem(sid(i), "S", 3, false)
	}
	for i := 4; i <= 6; i++ {
		h.sem(sid(i), "S", 3, true)
	}
	for i := 1; i <= 3; i++ {
		h.expire(sid(i), now0)
	}
	h.rec.take()
	// The form without a name ends every delay that is over.
	mustStatus(t, h.delayEnded("S", now0+int64(time.Minute)), fsm.StatusOK)
	seen := map[uint64]bool{}
	for n := 0; n < 5 && h.f.Ready("S") > 0; n++ {
		h.apply(fsm.Command{Type: fsm.TypeServeQueue, Lock: "S"})
	}
	for _, g := range h.rec.ofKind(fsm.EventGranted) {
		if seen[g.Token] {
			t.Fatalf("token %d granted twice: %+v", g.Token, h.rec.ofKind(fsm.EventGranted))
		}
		seen[g.Token] = true
	}
	wantHolders(t, h.f, "S", sid(4), sid(5), sid(6))
	if len(seen) != 3 {
		t.Fatalf("%d grants", len(seen))
	}
}
