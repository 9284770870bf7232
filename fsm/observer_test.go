package fsm_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

func TestObserverReceivesEventsInLogOrder(t *testing.T) {
	h := newHarness(t)
	a, b, c := sid(1), sid(2), sid(3)
	h.create(a)                                                                 // 1
	h.createDelay(b, time.Second)                                               // 2
	h.create(c)                                                                 // 3
	h.acquire(a, "L", "")                                                       // 4: a holds L
	h.queue(b, "L", "")                                                         // 5
	h.queue(c, "L", "")                                                         // 6
	h.acquire(b, "M", "")                                                       // 7: b holds M
	h.queue(c, "M", "")                                                         // 8
	h.release(a, "L", 4)                                                        // 9: L to b
	h.expire(b, now0)                                                           // 10: c leaves nothing; L to c, M delayed
	h.delayEnded("M", now0+1e9)                                                 // 11: M to c
	h.destroy(c)                                                                // 12: L and M freed
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "n1"}}) // 13

	type ev struct {
		Kind    fsm.EventKind
		Index   uint64
		Lock    string
		Session fsm.SessionID
		Token   uint64
	}
	var got []ev
	changed := map[uint64][]string{}
	last := uint64(0)
	for _, e := range h.rec.events {
		if e.Index < last {
			t.Fatalf("event %+v after index %d", e, last)
		}
		last = e.Index
		if e.Kind == fsm.EventLockChanged {
			if l := changed[e.Index]; len(l) == 0 || l[len(l)-1] != e.Lock {
				changed[e.Index] = append(changed[e.Index], e.Lock)
			}
			continue
		}
		got = append(got, ev{e.Kind, e.Index, e.Lock, e.Session, e.Token})
	}
	want := []ev{
		{fsm.EventSessionCreated, 1, "", a, 0},
		{fsm.EventSessionCreated, 2, "", b, 0},
		{fsm.EventSessionCreated, 3, "", c, 0},
		{fsm.EventGranted, 4, "L", a, 4},
		{fsm.EventGranted, 7, "M", b, 7},
		{fsm.EventReleased, 9, "L", a, 4},
		{fsm.EventGranted, 9, "L", b, 9},
		{fsm.EventReleased, 10, "L", b, 9},
		{fsm.EventDelayStarted, 10, "L", fsm.SessionID{}, 0},
		{fsm.EventReleased, 10, "M", b, 7},
		{fsm.EventDelayStarted, 10, "M", fsm.SessionID{}, 0},
		{fsm.EventSessionEnded, 10, "", b, 0},
		{fsm.EventGranted, 11, "M", c, 11},
		{fsm.EventReleased, 12, "M", c, 11},
		{fsm.EventSessionEnded, 12, "", c, 0},
		{fsm.EventMembersChanged, 13, "", fsm.SessionID{}, 0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n got %+v\nwant %+v", got, want)
	}
	// Every command that changed a lock says so, and nothing else does.
	wantChanged := map[uint64][]string{4: {"L"}, 5: {"L"}, 6: {"L"}, 7: {"M"}, 8: {"M"}, 9: {"L"},
		10: {"L", "M"}, 11: {"M"}, 12: {"L", "M"}}
	if !reflect.DeepEqual(changed, wantChanged) {
		t.Fatalf("lock-changed indexes %v, want %v", changed, wantChanged)
	}
	for _, e := range h.rec.ofKind(fsm.EventSessionEnded) {
		if e.Expired != (e.Session == b) {
			t.Fatalf("session-ended %+v: Expired wrong", e)
		}
	}
	if d := h.rec.ofKind(fsm.EventDelayStarted); d[0].DelayUntil != now0+int64(time.Second) {
		t.Fatalf("delay event %+v", d[0])
	}
}

// readingObserver reads the state back from inside Observe, which must be possible.
type readingObserver struct {
	f     *fsm.FSM
	calls int
	seen  []fsm.LockInfo
}

func (o *readingObserver) Observe(events []fsm.Event) {
	o.calls++
	for _, e := range events {
		if e.Kind == fsm.EventGranted {
			o.seen = append(o.seen, o.f.Lock(e.Lock))
		}
	}
}

func TestObserverIsCalledOnceAfterTheBatchWithoutTheLock(t *testing.T) {
	obs := &readingObserver{}
	f := fsm.New(obs)
	obs.f = f
	var logs []*raft.Log
	for i, c := range []fsm.Command{
		{Type: fsm.TypeCreateSession, Session: sid(1), TTL: time.Second},
		{Type: fsm.TypeCreateSession, Session: sid(2), TTL: time.Second},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L"},
		{Type: fsm.TypeAcquire, Session: sid(2), Lock: "L", Queue: true},
		{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: 3},
	} {
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: c.Encode(nil)})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.ApplyBatch(logs)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe deadlocked reading the state: it is called with the state lock held")
	}
	if obs.calls != 1 {
		t.Fatalf("observer called %d times for one batch, want 1", obs.calls)
	}
	// Both grants are reported; reads from Observe see the state after the whole batch.
	want := fsm.LockInfo{Name: "L", Held: true, Holder: sid(2), Token: 5, ModifyIndex: 5}
	if len(obs.seen) != 2 || obs.seen[0] != want || obs.seen[1] != want {
		t.Fatalf("observer read %+v", obs.seen)
	}
}

func TestObserverLearnsOfRestore(t *testing.T) {
	src := newHarness(t)
	src.create(sid(1))
	snap := snapshotBytes(t, src.f)
	h := newHarness(t)
	if err := h.f.Restore(readCloser(snap)); err != nil {
		t.Fatal(err)
	}
	if ev := h.rec.take(); len(ev) != 1 || ev[0].Kind != fsm.EventRestored {
		t.Fatalf("restore events %+v", ev)
	}
}
