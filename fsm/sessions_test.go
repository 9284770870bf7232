package fsm_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Sessions, listings and membership metadata.

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
		h, _, before := oneHolder(t, "L", "")
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
