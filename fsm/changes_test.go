package fsm_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// changeScript changes locks in every way a command can: grants, queues, a release handing
// the lock on, an expiry under lock-delay, an acquire that ends a lapsed delay and takes the
// lock in the same command (two changes of one lock in one command), a destroy that frees two
// locks at once, and a value change.
func changeScript() []fsm.Command {
	a, b, c := sid(1), sid(2), sid(3)
	return []fsm.Command{
		{Type: fsm.TypeCreateSession, Session: a, TTL: 10 * time.Second},                         // 1
		{Type: fsm.TypeCreateSession, Session: b, TTL: 10 * time.Second, LockDelay: time.Second}, // 2
		{Type: fsm.TypeCreateSession, Session: c, TTL: 10 * time.Second},                         // 3
		{Type: fsm.TypeAcquire, Session: a, Lock: "L", Value: "va", SetValue: true, Now: now0},   // 4
		{Type: fsm.TypeAcquire, Session: b, Lock: "L", Queue: true, Now: now0},                   // 5
		{Type: fsm.TypeRelease, Session: a, Lock: "L", Token: 4},                                 // 6: L to b
		{Type: fsm.TypeAcquire, Session: b, Lock: "M", Now: now0},                                // 7
		{Type: fsm.TypeExpireSession, Session: b, Now: now0},                                     // 8: L and M delayed
		{Type: fsm.TypeAcquire, Session: c, Lock: "L", Now: now0 + 2e9},                          // 9: delay over, c takes L
		{Type: fsm.TypeAcquire, Session: c, Lock: "L", Value: "vc", SetValue: true, Now: now0},   // 10: new value
		{Type: fsm.TypeDelayEnded, Lock: "M", Now: now0 + 2e9},                                   // 11: M free
		{Type: fsm.TypeAcquire, Session: c, Lock: "M", Now: now0},                                // 12
		{Type: fsm.TypeDestroySession, Session: c},                                               // 13: L and M freed
	}
}

// Each lock-changed event carries the lock's state right after its command, as a read after
// that command alone shows it, even when the whole script applies in one batch; and each
// command reports each lock it changed once.
func TestLockChangedEventsCarryTheStateAfterTheirCommand(t *testing.T) {
	script := changeScript()
	// The expected states: apply one command at a time and read the locks it changed.
	want := map[uint64]map[string]fsm.LockInfo{}
	step := newHarness(t)
	for _, c := range script {
		step.apply(c)
		for _, e := range step.rec.take() {
			if e.Kind == fsm.EventLockChanged {
				if want[e.Index] == nil {
					want[e.Index] = map[string]fsm.LockInfo{}
				}
				info := step.f.Lock(e.Lock)
				info.ModifyIndex = e.Index
				want[e.Index][e.Lock] = info
			}
		}
	}
	rec := &recorder{}
	f := fsm.New(rec)
	var logs []*raft.Log
	for i, c := range script {
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: c.Encode(nil)})
	}
	f.ApplyBatch(logs)
	got := map[uint64]map[string]fsm.LockInfo{}
	for _, e := range rec.ofKind(fsm.EventLockChanged) {
		if got[e.Index] == nil {
			got[e.Index] = map[string]fsm.LockInfo{}
		}
		if _, dup := got[e.Index][e.Lock]; dup {
			t.Fatalf("command %d reported lock %s twice", e.Index, e.Lock)
		}
		got[e.Index][e.Lock] = e.State.LockInfo
	}
	if len(got) != len(want) {
		t.Fatalf("changes at %d indexes, want %d: %v", len(got), len(want), got)
	}
	for index, locks := range want {
		for name, w := range locks {
			if g := got[index][name]; g != w {
				t.Errorf("lock %s at %d: event state %+v, want %+v", name, index, g, w)
			}
		}
	}
	// The script's landmarks, so that the comparison above cannot pass on empty states.
	if s := got[9]["L"]; !s.Held || s.Holder != sid(3) || s.Token != 9 {
		t.Errorf("index 9: L should be held by c under 9: %+v", s)
	}
	if s := got[13]["M"]; s.Held || s.ModifyIndex != 13 {
		t.Errorf("index 13: M should read free at 13: %+v", s)
	}
	if s := got[6]["L"]; !s.Held || s.Holder != sid(2) || s.Value != "" || s.Token != 6 {
		t.Errorf("index 6: L should be handed to b: %+v", s)
	}
}

// A restore reports the highest index at which a lock of the restored state changed, a freed
// lock's included: no lock change up to the snapshot lies above it.
func TestRestoreReportsTheLastLockChange(t *testing.T) {
	src := newHarness(t)
	src.create(sid(1))           // 1
	src.acquire(sid(1), "L", "") // 2
	src.acquire(sid(1), "M", "") // 3
	src.release(sid(1), "M", 3)  // 4: M freed, its entry removed
	src.create(sid(2))           // 5: no lock change
	restored := func() []fsm.Event {
		h := newHarness(t)
		if err := h.f.Restore(readCloser(snapshotBytes(t, src.f))); err != nil {
			t.Fatal(err)
		}
		return h.rec.take()
	}
	if ev := restored(); len(ev) != 1 || ev[0].Kind != fsm.EventRestored || ev[0].Index != 4 {
		t.Fatalf("restore events %+v, want one restored at 4 (the freed lock)", ev)
	}
	src.acquire(sid(2), "N", "") // 6
	if ev := restored(); len(ev) != 1 || ev[0].Index != 6 {
		t.Fatalf("restore events %+v, want one restored at 6", ev)
	}
}

// A restore whose reader tells the snapshot's index reports that index: a restored backup's
// state holds changes far below the index it is installed at, and every watcher from before
// must learn that the whole state was replaced.
func TestRestoreReportsTheSnapshotIndexWhenKnown(t *testing.T) {
	src := newHarness(t)
	src.create(sid(1))
	src.acquire(sid(1), "L", "") // 2
	h := newHarness(t)
	if err := h.f.Restore(positioned{bytes.NewReader(snapshotBytes(t, src.f)), 1_000_000_002, 3}); err != nil {
		t.Fatal(err)
	}
	if ev := h.rec.take(); len(ev) != 1 || ev[0].Kind != fsm.EventRestored || ev[0].Index != 1_000_000_002 {
		t.Fatalf("restore events %+v, want one restored at 1000000002", ev)
	}
}

// A semaphore's or shared lock's change lists every holder, as a read of the lock does; a
// plain lock's lists none, so that its change costs no holder list.
func TestLockChangedEventsListTheHoldersOfSharedLocks(t *testing.T) {
	h := newHarness(t)
	h.apply(enable(fsm.FeatureSemaphoresRWLocks))
	for i := 1; i <= 3; i++ {
		h.create(sid(i))
	}
	h.rec.take()
	h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "S", Limit: 3})
	h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(2), Lock: "S", Limit: 3})
	h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(3), Lock: "M"})
	changes := h.rec.ofKind(fsm.EventLockChanged)
	if len(changes) != 3 {
		t.Fatalf("%d lock changes, want 3: %+v", len(changes), changes)
	}
	if got, want := changes[1].State.Holders, h.f.LockView("S").Holders; len(got) != 2 || !reflect.DeepEqual(got, want) {
		t.Errorf("the semaphore's second grant reports holders %+v, want %+v", got, want)
	}
	if got := changes[2].State; !got.Held || got.Holders != nil {
		t.Errorf("the plain lock's change is %+v, want held with no holder list", got)
	}
}
