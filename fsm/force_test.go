package fsm_test

import (
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// A forced release ends the session that holds the lock under the token, as a destroy does
// (its waits too), and holds every lock it held back for its TTL plus its lock-delay from the
// leader's clock reading: the waiter is granted only by the DelayEnded the leader proposes
// once that time has passed on its own clock. A wrong token changes nothing.
func TestForceReleaseEndsTheHolderAndHoldsItsLocksBack(t *testing.T) {
	h := newHarness(t)
	mustStatus(t, h.apply(enable(fsm.FeatureForceRelease, fsm.FeatureSemaphoresRWLocks)), fsm.StatusOK)
	holder, waiter := sid(1), sid(2)
	h.createDelay(holder, 3*time.Second) // TTL 10s
	h.create(waiter)
	tok := h.acquire(holder, "L", "v").Token
	h.acquire(holder, "M", "")
	mustStatus(t, h.queue(holder, "Q", ""), fsm.StatusOK) // Q is free: granted
	h.queue(waiter, "L", "w")
	mustStatus(t, h.queue(holder, "W", ""), fsm.StatusOK)
	mustStatus(t, h.queue(waiter, "W", ""), fsm.StatusQueued)

	force := func(token uint64) fsm.Result {
		return h.apply(fsm.Command{Type: fsm.TypeForceRelease, Session: holder, Lock: "L", Token: token, Now: now0})
	}
	mustStatus(t, force(tok+1), fsm.StatusNotHolder)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeForceRelease, Session: waiter, Lock: "L", Token: tok, Now: now0}), fsm.StatusNotHolder)
	if !h.f.IsHolderToken("L", tok) {
		t.Fatal("a forced release under the wrong token or session changed the holder")
	}
	h.rec.take()
	r := force(tok)
	mustStatus(t, r, fsm.StatusOK)
	if want := []string{"L", "M", "Q", "W"}; len(r.Released) != len(want) {
		t.Fatalf("released %v, want %v", r.Released, want)
	}
	if _, ok := h.f.Session(holder); ok {
		t.Fatal("the holder's session outlived the forced release")
	}
	until := now0 + int64(13*time.Second)
	delays := h.rec.ofKind(fsm.EventDelayStarted)
	if len(delays) != 4 {
		t.Fatalf("%d lock-delays started, want one for each of the 4 locks: %+v", len(delays), delays)
	}
	for _, d := range delays {
		if d.Delay != 13*time.Second || d.DelayUntil != until {
			t.Fatalf("delay %+v, want the TTL plus the lock-delay (13s) from the command's clock", d)
		}
	}
	l := h.f.Lock("L")
	if l.Held || l.Waiters != 1 || l.DelayUntil != until {
		t.Fatalf("L after the forced release: %+v, want free, delayed to %d, its waiter still waiting", l, until)
	}
	if w := h.f.Lock("W"); w.Held || w.Waiters != 1 {
		t.Fatalf("W after the forced release: %+v", w)
	}
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: waiter, Lock: "M", Now: now0}), fsm.StatusLockDelayed)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: "L", Now: until - 1, DelayIndex: delays[0].DelayIndex}), fsm.StatusLockDelayed)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: "L", Now: until, DelayIndex: delays[0].DelayIndex}), fsm.StatusOK)
	if hi, ok := h.f.HoldOf("L", waiter); !ok || hi.Value != "w" || hi.Token <= tok {
		t.Fatalf("after the delay the waiter holds L as %+v (%v), want a newer token than %d", hi, ok, tok)
	}
	// A session that is gone is not found.
	mustStatus(t, force(tok), fsm.StatusSessionNotFound)
}

// Before the feature is enabled, a forced release (which a leader never proposes then)
// changes nothing, and a node that lacks the feature stops at it rather than skip it.
func TestForceReleaseNeedsItsFeature(t *testing.T) {
	h, a, before := oneHolder(t, "L", "v")
	c := fsm.Command{Type: fsm.TypeForceRelease, Session: a, Lock: "L", Token: 2, Now: now0}
	if got := c.MissingFeature(func(fsm.Feature) bool { return false }); got != fsm.FeatureForceRelease {
		t.Fatalf("MissingFeature = %q", got)
	}
	mustStatus(t, h.apply(c), fsm.StatusInvalid)
	if after := snapshotBytes(t, h.f); string(after) != string(before) {
		t.Fatal("a forced release before its feature was enabled changed the state")
	}
	old := fsm.New(nil, fsm.WithFeatures(fsm.FeatureSemaphoresRWLocks))
	old.ApplyCommand(1, fsm.Command{Type: fsm.TypeCreateSession, Session: a, TTL: time.Second})
	mustHalt(t, old, 2, c.Encode(nil))
}
