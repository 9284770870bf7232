package fsm_test

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// A capture records the index and term of the last entry applied with the state it captured,
// and writes the same snapshot as raft's Snapshot.
func TestCaptureHasTheLogPositionOfItsState(t *testing.T) {
	h := newHarness(t)
	h.create(sid(1))
	h.acquire(sid(1), "a", "v")
	h.f.ApplyBatch([]*raft.Log{{Index: 7, Term: 3, Type: raft.LogConfiguration}})
	c := h.f.Capture()
	h.acquire(sid(1), "b", "") // after the capture: not in it
	if c.Index != 7 || c.Term != 3 {
		t.Fatalf("capture at %d/%d, want 7/3", c.Index, c.Term)
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	restored := fsm.New(nil)
	if err := restored.Restore(readCloser(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if restored.Lock("b").Held || !restored.Lock("a").Held {
		t.Fatalf("captured state: a %+v, b %+v", restored.Lock("a"), restored.Lock("b"))
	}
}

// positioned is a snapshot reader that tells its log position, as the node's snapshot store's
// readers do.
type positioned struct {
	*bytes.Reader
	index, term uint64
}

func (p positioned) Close() error                           { return nil }
func (p positioned) SnapshotPosition() (index, term uint64) { return p.index, p.term }

// A restore from a reader that tells its position sets the applied index to it: a node
// restored from a snapshot has applied everything up to it, though ApplyBatch saw nothing.
func TestRestoreTakesTheSnapshotsPosition(t *testing.T) {
	h, _, snap := oneHolder(t, "a", "")
	f := fsm.New(nil)
	if err := f.Restore(wrapped{positioned{bytes.NewReader(snap), 41, 5}}); err != nil {
		t.Fatal(err)
	}
	if got := f.AppliedIndex(); got != 41 {
		t.Fatalf("applied index after the restore %d, want 41", got)
	}
	if c := f.Capture(); c.Index != 41 || c.Term != 5 {
		t.Fatalf("capture after the restore at %d/%d, want 41/5", c.Index, c.Term)
	}
	_ = h
}

// InspectSnapshot counts what a snapshot holds and finds the highest index in it, which a
// restore must stay above.
func TestInspectSnapshotCountsAndFindsTheHighestIndex(t *testing.T) {
	h := newHarness(t)
	h.create(sid(1))
	h.createDelay(sid(2), 5*time.Second)
	h.acquire(sid(1), "held", "")
	h.queue(sid(2), "held", "")
	h.acquire(sid(2), "delayed", "")
	h.expire(sid(2), now0)                    // "delayed" is under sid(2)'s delay now; its wait is gone
	tok := h.acquire(sid(1), "top", "").Token // the highest index in the state
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "n1", RaftAddr: "a:1", HTTPAddr: "a:2"}})
	sum, err := fsm.InspectSnapshot(bytes.NewReader(snapshotBytes(t, h.f)))
	if err != nil {
		t.Fatal(err)
	}
	want := fsm.SnapshotSummary{Version: 4, Sessions: 1, Locks: 3, Held: 2, Waiters: 0, Delayed: 1,
		Members: []fsm.Member{{ID: "n1", RaftAddr: "a:1", HTTPAddr: "a:2"}}, MaxIndex: tok}
	if sum.Version != want.Version || sum.Sessions != want.Sessions || sum.Locks != want.Locks || sum.Held != want.Held ||
		sum.Waiters != want.Waiters || sum.Delayed != want.Delayed || !slices.Equal(sum.Members, want.Members) || sum.MaxIndex != want.MaxIndex {
		t.Fatalf("summary %+v, want %+v", sum, want)
	}
	if _, err := fsm.InspectSnapshot(bytes.NewReader([]byte("RLSNAP\x09xxxxxxxx"))); !errors.Is(err, fsm.ErrSnapshotVersion) {
		t.Fatalf("a newer version: %v", err)
	}
}

// RewriteSnapshot with KeepSessions keeps the sessions and locks, takes the running cluster's
// members, and never drops a feature: the result enables both the snapshot's and the cluster's.
func TestRewriteSnapshotTakesMembersAndKeepsEveryFeature(t *testing.T) {
	h, a, _ := oneHolder(t, "a", "v")
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "old", RaftAddr: "o:1", HTTPAddr: "o:2"}})
	h.apply(fsm.Command{Type: fsm.TypeEnableFeatures, Features: []fsm.Feature{fsm.FeatureExpiryTerm}})
	members := []fsm.Member{{ID: "m1", RaftAddr: "m:1", HTTPAddr: "m:2"}}
	var out bytes.Buffer
	sum, err := fsm.RewriteSnapshot(bytes.NewReader(snapshotBytes(t, h.f)), &out, fsm.RestoreRewrite{Members: members,
		Features: []fsm.Feature{fsm.FeatureTokenDeleteDropsWaits, fsm.FeatureExpiryTerm}, KeepSessions: true})
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.New(nil)
	if err := f.Restore(readCloser(out.Bytes())); err != nil {
		t.Fatal(err)
	}
	want := []fsm.Feature{fsm.FeatureExpiryTerm, fsm.FeatureTokenDeleteDropsWaits}
	if !slices.Equal(f.Features(), want) || !slices.Equal(sum.Features, want) {
		t.Fatalf("features %v (summary %v), want %v", f.Features(), sum.Features, want)
	}
	if sum.Version != 5 {
		t.Fatalf("summary says format %d, want 5: the state has features, not semaphores-rwlocks", sum.Version)
	}
	if !slices.Equal(f.Members(), members) {
		t.Fatalf("members %v, want %v", f.Members(), members)
	}
	if l := f.Lock("a"); !l.Held || l.Holder != a || l.Value != "v" {
		t.Fatalf("lock %+v", l)
	}
}

// A semaphore's and a shared lock's state is written in format 6, whose summary counts a lock
// under several lock-delays once and finds the highest index among every grant and delay.
func TestInspectSnapshotOfSemaphoresAndSharedHolds(t *testing.T) {
	h := kindHarness(t, 4, 3)
	h.sem(sid(1), "S", 3, false)
	h.sem(sid(3), "S", 3, false)
	h.sem(sid(4), "S", 3, false)
	h.expire(sid(3), now0)
	h.expire(sid(4), now0) // "S": one permit held, two held back by delays
	h.rw(sid(1), "R", true, false)
	tok := h.rw(sid(2), "R", true, false).Token // the newest grant: the highest index
	sum, err := fsm.InspectSnapshot(bytes.NewReader(snapshotBytes(t, h.f)))
	if err != nil {
		t.Fatal(err)
	}
	if sum.Version != 6 || sum.Sessions != 2 || sum.Locks != 2 || sum.Delayed != 1 || sum.MaxIndex != tok {
		t.Fatalf("summary %+v, want format 6, 2 sessions, 2 locks, 1 delayed, highest index %d", sum, tok)
	}
}

// rewrite restores what RewriteSnapshot makes of f's state with rw into a new state machine.
func rewrite(t *testing.T, f *fsm.FSM, rw fsm.RestoreRewrite) (*fsm.FSM, fsm.SnapshotSummary) {
	t.Helper()
	var out bytes.Buffer
	sum, err := fsm.RewriteSnapshot(bytes.NewReader(snapshotBytes(t, f)), &out, rw)
	if err != nil {
		t.Fatal(err)
	}
	g := fsm.New(nil)
	if err := g.Restore(readCloser(out.Bytes())); err != nil {
		t.Fatalf("the rewritten snapshot does not restore: %v", err)
	}
	return g, sum
}

// delaysOf returns the lock-delays of the named lock.
func delaysOf(f *fsm.FSM, lock string) []fsm.DelayedLock {
	var out []fsm.DelayedLock
	for _, d := range f.DelayedLocks() {
		if d.Name == lock {
			out = append(out, d)
		}
	}
	return out
}

// A restore ends every session of the backup: no grant and no queue entry survives, so nobody
// holds what no client believes it holds; instead every lock held in the backup, or in the
// state the restore replaces (Live), is under a lock-delay as long as the longest time a
// client may believe it (its session's TTL plus its lock-delay), from the leader's clock.
func TestRewriteSnapshotEndsSessionsAndDelaysWhatWasHeld(t *testing.T) {
	const now = int64(1_000_000_000_000)
	h := newHarness(t)
	h.create(sid(1))
	h.createDelay(sid(2), 5*time.Second)
	h.acquire(sid(1), "held", "v")
	h.queue(sid(2), "held", "")
	h.acquire(sid(2), "delayed", "")
	first := h.acquire(sid(1), "awaited", "").Token
	h.queue(sid(2), "awaited", "")
	h.release(sid(1), "awaited", first) // handed to sid(2)
	top := h.acquire(sid(1), "top", "").Token
	live := []fsm.LiveHold{{Lock: "taken-after", Length: 7 * time.Second}, {Lock: "held", Length: 30 * time.Second}}
	g, sum := rewrite(t, h.f, fsm.RestoreRewrite{Live: live, Now: now, Index: 5000})
	if sum.Sessions != 0 || sum.Held != 0 || sum.Waiters != 0 || len(g.Sessions()) != 0 {
		t.Fatalf("after the rewrite: %+v, sessions %v: want none, nothing held or awaited", sum, g.Sessions())
	}
	for lock, want := range map[string]time.Duration{
		"held":        30 * time.Second,               // the live hold's, longer than the backup's
		"delayed":     10*time.Second + 5*time.Second, // TTL plus lock-delay
		"awaited":     15 * time.Second,
		"top":         10 * time.Second,
		"taken-after": 7 * time.Second,
	} {
		ds := delaysOf(g, lock)
		if len(ds) != 1 || ds[0].Length != want || ds[0].Until != now+int64(want) {
			t.Fatalf("%s: delays %+v, want one of %v from %d", lock, ds, want, now)
		}
		if l := g.Lock(lock); l.Held || l.ModifyIndex != 5000 {
			t.Fatalf("%s: %+v, want not held, modified at the restore's index", lock, l)
		}
	}
	if l := g.Lock("never"); l.ModifyIndex != 5000 {
		t.Fatalf("an absent lock reads %+v, want modified at the restore's index", l)
	}
	if sum.MaxIndex < top {
		t.Fatalf("highest index %d below the backup's token %d", sum.MaxIndex, top)
	}
}

// With semaphores-rwlocks, a semaphore keeps back as many permits as were held, a lock held
// shared only holds back writers, and the new delays are named above every index of the backup
// (its own delays' too), so that the leader's timers end each of them.
func TestRewriteSnapshotHoldsBackSemaphorePermitsAndSharedHolds(t *testing.T) {
	const now = int64(1_000_000_000_000)
	h := kindHarness(t, 4, 4)
	h.sem(sid(1), "S", 3, false)
	h.sem(sid(2), "S", 3, false)
	h.rw(sid(1), "R", true, false)
	h.rw(sid(4), "R", true, false)
	h.expire(sid(4), now0) // "R": one shared hold, one shared delay
	before, err := fsm.InspectSnapshot(bytes.NewReader(snapshotBytes(t, h.f)))
	if err != nil {
		t.Fatal(err)
	}
	g, sum := rewrite(t, h.f, fsm.RestoreRewrite{Now: now, Live: []fsm.LiveHold{{Lock: "S", Limit: 3, Length: time.Second}}})
	if sum.Sessions != 0 || sum.Held != 0 {
		t.Fatalf("summary %+v", sum)
	}
	s := delaysOf(g, "S")
	if len(s) != 3 || s[0].Index <= 0 || s[0].Index == s[1].Index {
		t.Fatalf("semaphore delays %+v, want 3 (two grants of the backup, one live), named apart", s)
	}
	for _, d := range s {
		if d.Index <= before.MaxIndex || d.Index > sum.MaxIndex || d.Length != 10*time.Second {
			t.Fatalf("semaphore delay %+v", d)
		}
	}
	r := delaysOf(g, "R")
	if len(r) != 1 || r[0].Length != 10*time.Second || r[0].Index <= before.MaxIndex {
		t.Fatalf("shared lock delays %+v, want one of 10s named above %d", r, before.MaxIndex)
	}
	if v := g.LockView("R"); !v.Shared {
		t.Fatalf("the shared lock's delay is not shared: %+v", v)
	}
}
