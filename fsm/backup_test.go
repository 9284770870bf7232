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

// RewriteSnapshot keeps the sessions and locks, takes the running cluster's members, and
// never drops a feature: the result enables both the snapshot's and the cluster's.
func TestRewriteSnapshotTakesMembersAndKeepsEveryFeature(t *testing.T) {
	h, a, _ := oneHolder(t, "a", "v")
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "old", RaftAddr: "o:1", HTTPAddr: "o:2"}})
	h.apply(fsm.Command{Type: fsm.TypeEnableFeatures, Features: []fsm.Feature{fsm.FeatureExpiryTerm}})
	members := []fsm.Member{{ID: "m1", RaftAddr: "m:1", HTTPAddr: "m:2"}}
	var out bytes.Buffer
	sum, err := fsm.RewriteSnapshot(bytes.NewReader(snapshotBytes(t, h.f)), &out, members,
		[]fsm.Feature{fsm.FeatureTokenDeleteDropsWaits, fsm.FeatureExpiryTerm})
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
