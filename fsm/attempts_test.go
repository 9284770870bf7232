package fsm_test

import (
	"fmt"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// numberedAcquire is an acquire of lock by id under the numbered attempt seq with floor.
func numberedAcquire(id fsm.SessionID, lock string, seq, floor uint64) fsm.Command {
	return fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: lock, AttemptSeq: seq, AttemptFloor: floor, Now: now0}
}

// A worker on one long-lived session does many Lock/Unlock cycles. A late request of its
// first attempt (held by a paused follower) must still be refused after any number of them:
// with the 16 string fences a session kept, the seventeenth cycle forgot it, and the late
// acquire was granted to a session in which no Mutex believed it held the lock.
func TestNumberedAttemptsAreNeverForgotten(t *testing.T) {
	for _, floors := range []bool{false, true} {
		t.Run(fmt.Sprint("floors=", floors), func(t *testing.T) {
			h := newHarness(t)
			h.apply(enable(fsm.FeatureAttemptNumbers))
			a := sid(1)
			h.create(a)
			r := h.apply(numberedAcquire(a, "first", 1, 0))
			mustStatus(t, r, fsm.StatusOK)
			h.apply(fsm.Command{Type: fsm.TypeRelease, Session: a, Lock: "first", Token: r.Token, AttemptSeq: 1})
			for seq := uint64(2); seq < 1002; seq++ {
				var floor uint64
				if floors {
					floor = seq // the client's older attempts have all ended
				}
				r := h.apply(numberedAcquire(a, "other", seq, floor))
				mustStatus(t, r, fsm.StatusOK)
				h.apply(fsm.Command{Type: fsm.TypeRelease, Session: a, Lock: "other", Token: r.Token, AttemptSeq: seq, AttemptFloor: floor})
			}
			mustStatus(t, h.apply(numberedAcquire(a, "first", 1, 0)), fsm.StatusAttemptCancelled)
			mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "first", Queue: true, AttemptSeq: 1, Now: now0}), fsm.StatusAttemptCancelled)
			if l := h.f.Lock("first"); l.Held || l.Waiters != 0 {
				t.Fatalf("a late request of an ended attempt took the lock: %+v", l)
			}
			// What the session keeps stays small when the client reports its floor.
			if floor, ended := fsm.AttemptRecords(h.f, a); floors && (floor != 1001 || len(ended) != 1) {
				t.Fatalf("floor %d, ended %v: want the floor at the last attempt and one record", floor, ended)
			}
			// A new attempt of the same lock still works.
			mustStatus(t, h.apply(numberedAcquire(a, "first", 5000, 0)), fsm.StatusOK)
		})
	}
}

// The rule is per lock: an attempt on one lock ending does not refuse an older attempt still
// running on another lock (one session, two Mutexes), unless the client's floor says that
// older attempt has ended too.
func TestAttemptEndsArePerLockAndTheFloorCoversAllLocks(t *testing.T) {
	h := newHarness(t)
	h.apply(enable(fsm.FeatureAttemptNumbers))
	a, b := sid(1), sid(2)
	h.create(a)
	h.create(b)
	h.acquire(b, "X", "")
	// Attempt 5 of X waits; attempt 6 of Y is taken and released.
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "X", Queue: true, AttemptSeq: 5, Now: now0}), fsm.StatusQueued)
	r := h.apply(numberedAcquire(a, "Y", 6, 5))
	h.apply(fsm.Command{Type: fsm.TypeRelease, Session: a, Lock: "Y", Token: r.Token, AttemptSeq: 6, AttemptFloor: 5})
	// Attempt 5's retry keeps its place.
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "X", Queue: true, AttemptSeq: 5, Now: now0}), fsm.StatusQueued)
	// Attempt 5 ends (cancelled); then attempt 7 of X starts, and a late request of 5 is refused.
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeCancelWait, Session: a, Lock: "X", AttemptSeq: 5, AttemptFloor: 5}), fsm.StatusCancelled)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "X", Queue: true, AttemptSeq: 5, Now: now0}), fsm.StatusAttemptCancelled)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "X", Queue: true, AttemptSeq: 7, AttemptFloor: 7, Now: now0}), fsm.StatusQueued)
	// With the floor at 7, anything older is refused on any lock, even one never named.
	mustStatus(t, h.apply(numberedAcquire(a, "Z", 6, 0)), fsm.StatusAttemptCancelled)
	if floor, ended := fsm.AttemptRecords(h.f, a); floor != 7 || len(ended) != 0 {
		t.Fatalf("floor %d, ended %v: the floor covers every record", floor, ended)
	}
	// A delayed request carrying an older floor does not lower it.
	mustStatus(t, h.apply(numberedAcquire(a, "Z", 6, 2)), fsm.StatusAttemptCancelled)
	if l := h.f.Lock("Z"); l.Held {
		t.Fatalf("Z granted to an attempt below the floor: %+v", l)
	}
}

// Numbered attempts and floors survive a snapshot, in the version-5 format that a state with
// features is written in; without features the snapshot stays in version 4, which the
// version before features reads.
func TestAttemptRecordsSurviveSnapshots(t *testing.T) {
	h := newHarness(t)
	if v := snapshotBytes(t, h.f)[6]; v != 4 {
		t.Fatalf("snapshot version %d without features, want 4", v)
	}
	a := sid(1)
	h.create(a)
	// Before the feature is enabled, numbered fields change nothing (a leader never proposes
	// them then), so the state never holds what the version-4 format cannot.
	before := snapshotBytes(t, h.f)
	h.apply(fsm.Command{Type: fsm.TypeCancelWait, Session: a, Lock: "L", AttemptSeq: 9, AttemptFloor: 3})
	if after := snapshotBytes(t, h.f); string(after) != string(before) {
		t.Fatal("numbered fields changed the state before the feature was enabled")
	}
	h.apply(enable(fsm.FeatureAttemptNumbers))
	h.apply(fsm.Command{Type: fsm.TypeCancelWait, Session: a, Lock: "L", AttemptSeq: 9, AttemptFloor: 3})
	h.apply(fsm.Command{Type: fsm.TypeCancelWait, Session: a, Lock: "K", AttemptSeq: 4})
	snap := snapshotBytes(t, h.f)
	if snap[6] != 5 {
		t.Fatalf("snapshot version %d with features, want 5", snap[6])
	}
	r := fsm.New(nil)
	if err := r.Restore(readCloser(snap)); err != nil {
		t.Fatal(err)
	}
	floor, ended := fsm.AttemptRecords(r, a)
	if floor != 3 || ended["L"] != 9 || ended["K"] != 4 || len(ended) != 2 {
		t.Fatalf("restored floor %d, ended %v", floor, ended)
	}
	if got := r.Features(); len(got) != 1 || got[0] != fsm.FeatureAttemptNumbers {
		t.Fatalf("restored features %v", got)
	}
	res := r.ApplyCommand(100, numberedAcquire(a, "L", 9, 0))
	mustStatus(t, res, fsm.StatusAttemptCancelled)
}

// exactRules enables numbered attempts and the rule that attempts end exactly when the state
// machine decides (FeatureAttemptEnds); legacy leaves the second off, as a cluster with a
// member of the previous version has it.
func exactRules(h *harness, exact bool) {
	if exact {
		h.apply(enable(fsm.FeatureAttemptEnds, fsm.FeatureAttemptNumbers))
	} else {
		h.apply(enable(fsm.FeatureAttemptNumbers))
	}
}

// A late copy of a cancel of an attempt that had already ended must not take out the
// session's newer queue entry: b queues (attempt 3), cancels 3, queues again (attempt 5), c
// queues behind it, and the replayed cancel of 3 took b out, so the release granted c before
// b. The old rule stays until the feature is enabled.
func TestLateCancelOfAnEndedAttemptKeepsTheNewerQueueEntry(t *testing.T) {
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprint("exact=", exact), func(t *testing.T) {
			h := newHarness(t)
			exactRules(h, exact)
			a, b, c := sid(1), sid(2), sid(3)
			h.create(a)
			h.create(b)
			h.create(c)
			held := h.acquire(a, "L", "")
			mustStatus(t, held, fsm.StatusOK)
			queue := func(id fsm.SessionID, seq, floor uint64) fsm.Result {
				return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: "L", Queue: true, AttemptSeq: seq, AttemptFloor: floor, Now: now0})
			}
			cancel3 := fsm.Command{Type: fsm.TypeCancelWait, Session: b, Lock: "L", AttemptSeq: 3, AttemptFloor: 3}
			mustStatus(t, queue(b, 3, 3), fsm.StatusQueued)
			mustStatus(t, h.apply(cancel3), fsm.StatusCancelled)
			mustStatus(t, queue(b, 5, 5), fsm.StatusQueued)
			mustStatus(t, queue(c, 1, 1), fsm.StatusQueued)
			replay := h.apply(cancel3)
			mustStatus(t, h.release(a, "L", held.Token), fsm.StatusOK)
			got := h.f.Lock("L").Holder
			if exact {
				mustStatus(t, replay, fsm.StatusNotQueued)
				if got != b {
					t.Fatalf("granted to %v, want b (%v), first in the queue", got, b)
				}
				return
			}
			// The previous version's rule, kept for a cluster that has not enabled the feature.
			mustStatus(t, replay, fsm.StatusCancelled)
			if got != c {
				t.Fatalf("old rule: granted to %v, want c (%v)", got, c)
			}
		})
	}
}

// The same holds for string attempts: a cancel of one already fenced changes nothing.
func TestLateCancelOfAFencedStringAttemptKeepsTheQueueEntry(t *testing.T) {
	h := newHarness(t)
	exactRules(h, true)
	a, b, c := sid(1), sid(2), sid(3)
	h.create(a)
	h.create(b)
	h.create(c)
	held := h.acquire(a, "L", "")
	queue := func(id fsm.SessionID, attempt string) fsm.Result {
		return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: "L", Queue: true, Attempt: attempt, Now: now0})
	}
	cancelX := fsm.Command{Type: fsm.TypeCancelWait, Session: b, Lock: "L", Attempt: "x"}
	mustStatus(t, queue(b, "x"), fsm.StatusQueued)
	mustStatus(t, h.apply(cancelX), fsm.StatusCancelled)
	mustStatus(t, queue(b, "y"), fsm.StatusQueued)
	mustStatus(t, queue(c, "z"), fsm.StatusQueued)
	mustStatus(t, h.apply(cancelX), fsm.StatusNotQueued)
	h.release(a, "L", held.Token)
	if got := h.f.Lock("L").Holder; got != b {
		t.Fatalf("granted to %v, want b (%v)", got, b)
	}
}

// A try refused because the lock is held ends its attempt in the same command: the client
// ends it too, sending nothing more, so a late copy of the request (delivered before the
// session's next request) must be refused rather than granted to a session that believes it
// holds nothing. Likewise a Lock refused limit_mismatch or mode_mismatch.
func TestRefusedAcquireEndsItsAttempt(t *testing.T) {
	type step struct {
		name   string
		setup  func(h *harness, a fsm.SessionID) // makes the acquire below refused
		req    fsm.Command
		refuse fsm.Status
		free   func(h *harness) // frees the lock so that a late copy could be granted
	}
	b := sid(2)
	var held fsm.Result
	steps := []step{
		{
			name:   "try-lock-held",
			setup:  func(h *harness, a fsm.SessionID) { held = h.acquire(a, "L", "") },
			req:    fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", AttemptSeq: 1, AttemptFloor: 1, Now: now0},
			refuse: fsm.StatusLockHeld,
			free:   func(h *harness) { h.release(sid(1), "L", held.Token) },
		},
		{
			name:   "try-lock-held-string-form",
			setup:  func(h *harness, a fsm.SessionID) { held = h.acquire(a, "L", "") },
			req:    fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Attempt: "~1", Now: now0},
			refuse: fsm.StatusLockHeld,
			free:   func(h *harness) { h.release(sid(1), "L", held.Token) },
		},
		{
			name: "lock-limit-mismatch",
			setup: func(h *harness, a fsm.SessionID) {
				held = h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "L", Limit: 3, Now: now0})
			},
			req:    fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Queue: true, AttemptSeq: 1, AttemptFloor: 1, Now: now0},
			refuse: fsm.StatusLimitMismatch,
			free:   func(h *harness) { h.release(sid(1), "L", held.Token) },
		},
		{
			name: "lock-mode-mismatch",
			setup: func(h *harness, a fsm.SessionID) {
				held = h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Shared: true, Now: now0})
			},
			req:    fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Queue: true, AttemptSeq: 1, AttemptFloor: 1, Now: now0},
			refuse: fsm.StatusModeMismatch,
			free:   func(h *harness) { h.release(b, "L", held.Token) },
		},
	}
	for _, s := range steps {
		for _, exact := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/exact=%t", s.name, exact), func(t *testing.T) {
				h := newHarness(t)
				exactRules(h, exact)
				h.apply(enable(fsm.FeatureSemaphoresRWLocks))
				a := sid(1)
				h.create(a)
				h.create(b)
				s.setup(h, a)
				mustStatus(t, h.apply(s.req), s.refuse)
				s.free(h)
				late := h.apply(s.req) // the same request, delivered again
				if !exact {
					// The previous version's rule: granted (or queued) to nobody's belief.
					if late.Status == fsm.StatusAttemptCancelled {
						t.Fatalf("old rule changed: %+v", late)
					}
					return
				}
				mustStatus(t, late, fsm.StatusAttemptCancelled)
				if l := h.f.Lock("L"); l.Held || l.Waiters != 0 {
					t.Fatalf("a late copy of a refused acquire took the lock: %+v", l)
				}
				// The session's next attempt works.
				next := s.req
				next.Attempt, next.AttemptSeq, next.AttemptFloor = "", 2, 2
				next.Limit, next.Shared, next.Queue = 0, false, false
				mustStatus(t, h.apply(next), fsm.StatusOK)
			})
		}
	}
}
