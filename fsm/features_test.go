package fsm_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

func enable(fs ...fsm.Feature) fsm.Command {
	return fsm.Command{Type: fsm.TypeEnableFeatures, Features: fs}
}

// Features are only ever added; an invalid list changes nothing.
func TestEnableFeaturesOnlyAdds(t *testing.T) {
	h := newHarness(t)
	mustStatus(t, h.apply(enable()), fsm.StatusInvalid)
	mustStatus(t, h.apply(enable(fsm.FeatureExpiryTerm, fsm.FeatureAttemptNumbers)), fsm.StatusInvalid) // unsorted
	if got := h.f.Features(); len(got) != 0 {
		t.Fatalf("invalid lists enabled %v", got)
	}
	h.rec.take()
	mustStatus(t, h.apply(enable(fsm.FeatureExpiryTerm)), fsm.StatusOK)
	mustStatus(t, h.apply(enable(fsm.FeatureAttemptNumbers, fsm.FeatureExpiryTerm)), fsm.StatusOK)
	if n := len(h.rec.ofKind(fsm.EventFeaturesChanged)); n != 2 {
		t.Fatalf("%d feature events, want 2", n)
	}
	h.rec.take()
	mustStatus(t, h.apply(enable(fsm.FeatureExpiryTerm)), fsm.StatusOK)
	if n := len(h.rec.ofKind(fsm.EventFeaturesChanged)); n != 0 {
		t.Fatal("enabling an enabled feature reported a change")
	}
	want := []fsm.Feature{fsm.FeatureAttemptNumbers, fsm.FeatureExpiryTerm}
	if got := h.f.Features(); !reflect.DeepEqual(got, want) || !h.f.FeatureEnabled(fsm.FeatureExpiryTerm) || h.f.FeatureEnabled(fsm.FeatureTokenDeleteDropsWaits) {
		t.Fatalf("features %v", got)
	}
}

// A node that lacks a feature (an older version, or one started with it switched off) stops on
// the first entry that enables or uses it, rather than skip it and drift from the others, and
// refuses a snapshot that uses it.
func TestANodeStopsOnAFeatureItLacks(t *testing.T) {
	a := sid(1)
	entries := map[string]fsm.Command{
		"enable":            enable(fsm.FeatureAttemptNumbers),
		"numbered acquire":  numberedAcquire(a, "L", 1, 0),
		"floor on a cancel": {Type: fsm.TypeCancelWait, Session: a, Lock: "L", AttemptFloor: 2},
		"expiry with term":  {Type: fsm.TypeExpireSession, Session: a, Now: now0, Term: 1},
	}
	for name, c := range entries {
		t.Run(name, func(t *testing.T) {
			old := fsm.New(nil, fsm.WithFeatures(fsm.FeatureTokenDeleteDropsWaits))
			old.ApplyCommand(1, fsm.Command{Type: fsm.TypeCreateSession, Session: a, TTL: time.Second})
			mustHalt(t, old, 2, c.Encode(nil))
		})
	}
	h := newHarness(t)
	h.apply(enable(fsm.FeatureAttemptNumbers))
	old := fsm.New(nil, fsm.WithFeatures())
	if err := old.Restore(readCloser(snapshotBytes(t, h.f))); err == nil || !strings.Contains(err.Error(), "attempt-numbers") {
		t.Fatalf("restore of a snapshot with a feature the node lacks: %v", err)
	}
}

// An expiry decided by the timers of one term applies only in an entry of that term: a node
// deposed and re-elected while its expiry waited must not end a session that the new term's
// timers (which restart at the full TTL) have not expired.
func TestExpiryFromAnEarlierTermIsDropped(t *testing.T) {
	h := newHarness(t)
	h.apply(enable(fsm.FeatureExpiryTerm))
	a := sid(1)
	h.create(a)
	h.acquire(a, "L", "v")
	before := snapshotBytes(t, h.f)
	apply := func(index, term, decided uint64) fsm.Result {
		c := fsm.Command{Type: fsm.TypeExpireSession, Session: a, Now: now0, Term: decided}
		return h.f.Apply(&raft.Log{Index: index, Term: term, Type: raft.LogCommand, Data: c.Encode(nil)}).(fsm.Result)
	}
	mustStatus(t, apply(10, 5, 3), fsm.StatusStaleTerm)
	if l := h.f.Lock("L"); !l.Held || l.Holder != a {
		t.Fatalf("a stale expiry released the lock: %+v", l)
	}
	if after := snapshotBytes(t, h.f); string(after) != string(before) {
		t.Fatal("a stale expiry changed the state")
	}
	r := apply(11, 5, 5)
	if r.Status != fsm.StatusOK || fmt.Sprint(r.Released) != "[L]" {
		t.Fatalf("expiry in its own term: %+v", r)
	}
}

// Once enabled, deleting a token takes the sessions it owns out of every queue in the same
// command, so that no wait admitted under the token is granted after the delete; their holds
// stay until they expire. Before the feature is enabled the delete keeps its old effect, which
// every node of the older version applies alike.
func TestTokenDeleteDropsItsSessionsWaits(t *testing.T) {
	for _, enabled := range []bool{false, true} {
		t.Run(fmt.Sprint("enabled=", enabled), func(t *testing.T) {
			h := newHarness(t)
			if enabled {
				h.apply(enable(fsm.FeatureTokenDeleteDropsWaits))
			}
			h.apply(bootstrap("root"))
			h.apply(createToken("w", fsm.ManagementPolicy))
			holder, waiter, other := sid(1), sid(2), sid(3)
			h.create(holder)
			h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: waiter, TTL: time.Second, Owner: "acc-w"})
			h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: other, TTL: time.Second, Owner: "acc-root"})
			h.acquire(holder, "L", "")
			h.acquire(waiter, "M", "")
			mustStatus(t, h.queue(waiter, "L", ""), fsm.StatusQueued)
			mustStatus(t, h.queue(other, "L", ""), fsm.StatusQueued)
			h.rec.take()
			mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeACLDeleteToken, ACLToken: fsm.ACLToken{AccessorID: "acc-w"}}), fsm.StatusOK)
			want := []fsm.Waiter{{Session: waiter}, {Session: other}}
			if enabled {
				want = want[1:]
				if ev := h.rec.ofKind(fsm.EventWaitDropped); len(ev) != 1 || ev[0].Session != waiter || ev[0].Lock != "L" {
					t.Fatalf("wait-dropped events %+v", ev)
				}
			}
			if got := fsm.Waiters(h.f, "L"); !reflect.DeepEqual(got, want) {
				t.Fatalf("queue after the delete %v, want %v", got, want)
			}
			if l := h.f.Lock("M"); !l.Held || l.Holder != waiter {
				t.Fatalf("the deleted token's session lost its hold: %+v", l)
			}
			h.release(holder, "L", h.f.Lock("L").Token)
			if l := h.f.Lock("L"); !l.Held || l.Holder != want[0].Session {
				t.Fatalf("L went to %v, want %v", l.Holder, want[0].Session)
			}
			if err := fsm.CheckIntegrity(h.f); err != nil {
				t.Fatal(err)
			}
		})
	}
}
