package fsm_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// timed applies commands at indexes 1, 2, ... each in a log entry appended at its own time.
type timed struct {
	t     *testing.T
	f     *fsm.FSM
	index uint64
}

func (h *timed) at(sec int64, c fsm.Command) fsm.Result {
	h.t.Helper()
	h.index++
	r := h.f.ApplyCommandAt(h.index, time.Unix(1_700_000_000+sec, 5), c)
	if r.Err != nil {
		h.t.Fatalf("apply %+v: %v", c, r.Err)
	}
	return r
}

func unix(sec int64) int64 { return time.Unix(1_700_000_000+sec, 5).UnixNano() }

// Each grant and each queue entry keeps the time of the log entry that made it, the queue is
// read in order with the waiting sessions' names, and a session reads the locks it waits for;
// a snapshot keeps the times (version 7).
func TestGrantsAndWaitsKeepTheirEntrysTime(t *testing.T) {
	h := &timed{t: t, f: fsm.New(nil)}
	h.at(0, enable(fsm.FeatureGrantTimes, fsm.FeatureSemaphoresRWLocks))
	a, b, c := sid(1), sid(2), sid(3)
	for i, id := range []fsm.SessionID{a, b, c} {
		h.at(1, fsm.Command{Type: fsm.TypeCreateSession, Session: id, Name: string(rune('a' + i)), TTL: 10 * time.Second})
	}
	tok := h.at(10, fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "L"}).Token
	mustStatus(t, h.at(20, fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Queue: true}), fsm.StatusQueued)
	mustStatus(t, h.at(30, fsm.Command{Type: fsm.TypeAcquire, Session: c, Lock: "L", Queue: true, Shared: true}), fsm.StatusQueued)

	v := h.f.LockView("L")
	if v.Since != unix(10) || len(v.Holders) != 1 || v.Holders[0].Since != unix(10) {
		t.Fatalf("holder since %d / %+v, want %d", v.Since, v.Holders, unix(10))
	}
	want := []fsm.WaiterInfo{{Session: b, Name: "b", Since: unix(20)}, {Session: c, Name: "c", Shared: true, Since: unix(30)}}
	if !reflect.DeepEqual(v.Queue, want) {
		t.Fatalf("queue %+v, want %+v", v.Queue, want)
	}
	if s, _ := h.f.Session(b); !reflect.DeepEqual(s.Waiting, []fsm.WaitInfo{{Lock: "L", Since: unix(20)}}) {
		t.Fatalf("b waits for %+v", s.Waiting)
	}
	var listed fsm.SessionInfo
	for _, s := range h.f.Sessions() {
		if s.ID == c {
			listed = s
		}
	}
	if !reflect.DeepEqual(listed.Waiting, []fsm.WaitInfo{{Lock: "L", Since: unix(30)}}) {
		t.Fatalf("the session list says c waits for %+v", listed.Waiting)
	}
	if views := h.f.LockViews(""); len(views) != 1 || !reflect.DeepEqual(views[0].Queue, want) {
		t.Fatalf("lock list %+v", views)
	}

	// A snapshot keeps every time.
	snap := snapshotBytes(t, h.f)
	if snap[len("RLSNAP")] != 7 {
		t.Fatalf("snapshot version %d, want 7", snap[len("RLSNAP")])
	}
	r := fsm.New(nil)
	if err := r.Restore(readCloser(snap)); err != nil {
		t.Fatal(err)
	}
	if got := r.LockView("L"); !reflect.DeepEqual(got, v) {
		t.Fatalf("restored %+v, want %+v", got, v)
	}

	// The waiter granted by the release has the release's time, not the time it queued.
	h.at(40, fsm.Command{Type: fsm.TypeRelease, Session: a, Lock: "L", Token: tok})
	if hi, ok := h.f.HoldOf("L", b); !ok || hi.Since != unix(40) {
		t.Fatalf("b's grant %+v (%v), want since %d", hi, ok, unix(40))
	}
	if q := h.f.LockView("L").Queue; len(q) != 1 || q[0].Session != c || q[0].Since != unix(30) {
		t.Fatalf("queue after the grant: %+v", q)
	}
}

// Until the feature is enabled nothing keeps a time, and snapshots stay in the previous
// version's format (6), which the previous build reads.
func TestGrantTimesWaitForTheirFeature(t *testing.T) {
	h := &timed{t: t, f: fsm.New(nil)}
	h.at(0, enable(fsm.FeatureSemaphoresRWLocks))
	a, b := sid(1), sid(2)
	h.at(1, fsm.Command{Type: fsm.TypeCreateSession, Session: a, TTL: 10 * time.Second})
	h.at(1, fsm.Command{Type: fsm.TypeCreateSession, Session: b, TTL: 10 * time.Second})
	h.at(10, fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "L"})
	h.at(20, fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Queue: true})
	v := h.f.LockView("L")
	if v.Since != 0 || v.Holders[0].Since != 0 || len(v.Queue) != 1 || v.Queue[0].Since != 0 {
		t.Fatalf("times kept before the feature: %+v", v)
	}
	if snap := snapshotBytes(t, h.f); snap[len("RLSNAP")] != 6 {
		t.Fatalf("snapshot version %d before grant-times, want 6", snap[len("RLSNAP")])
	}
	// Enabled later: the entries that come after it keep their times; those before stay 0.
	h.at(30, enable(fsm.FeatureGrantTimes))
	h.at(40, fsm.Command{Type: fsm.TypeCancelWait, Session: b, Lock: "L"})
	h.at(50, fsm.Command{Type: fsm.TypeAcquire, Session: b, Lock: "L", Queue: true})
	v = h.f.LockView("L")
	if v.Since != 0 || v.Queue[0].Since != unix(50) {
		t.Fatalf("after enabling: %+v", v)
	}
}
