package fsm_test

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// sid returns a distinct, valid session id for a small number.
func sid(n int) fsm.SessionID {
	var id fsm.SessionID
	id[0] = 0xA0
	id[14] = byte(n >> 8)
	id[15] = byte(n)
	return id
}

// recorder is an Observer that keeps a copy of every event it is given.
type recorder struct {
	events []fsm.Event
}

func (r *recorder) Observe(events []fsm.Event) {
	r.events = append(r.events, events...)
}

// take returns the recorded events and forgets them.
func (r *recorder) take() []fsm.Event {
	ev := r.events
	r.events = nil
	return ev
}

// ofKind returns the recorded events of the given kinds, in order.
func (r *recorder) ofKind(kinds ...fsm.EventKind) []fsm.Event {
	var out []fsm.Event
	for _, e := range r.events {
		for _, k := range kinds {
			if e.Kind == k {
				out = append(out, e)
			}
		}
	}
	return out
}

// harness applies commands at increasing indexes, the way raft would, and fails the test on
// a decode error.
type harness struct {
	t     testing.TB
	f     *fsm.FSM
	rec   *recorder
	index uint64
}

func newHarness(t testing.TB) *harness {
	rec := &recorder{}
	return &harness{t: t, f: fsm.New(rec), rec: rec}
}

// oneHolder returns a harness in which session 1 holds lock (with value), the session, and
// the state's snapshot, against which a test checks that something changed nothing.
func oneHolder(t testing.TB, lock, value string) (h *harness, a fsm.SessionID, before []byte) {
	t.Helper()
	h = newHarness(t)
	a = sid(1)
	h.create(a)
	h.acquire(a, lock, value)
	return h, a, snapshotBytes(t, h.f)
}

func (h *harness) apply(c fsm.Command) fsm.Result {
	h.t.Helper()
	h.index++
	r := h.f.ApplyCommand(h.index, c)
	if r.Err != nil {
		h.t.Fatalf("apply %+v at %d: %v", c, h.index, r.Err)
	}
	if r.Index != h.index {
		h.t.Fatalf("result index %d, want %d", r.Index, h.index)
	}
	return r
}

func (h *harness) create(id fsm.SessionID) fsm.Result {
	h.t.Helper()
	return h.createDelay(id, 0)
}

func (h *harness) createDelay(id fsm.SessionID, delay time.Duration) fsm.Result {
	h.t.Helper()
	r := h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: id, Name: "s", TTL: 10 * time.Second, LockDelay: delay})
	if r.Status != fsm.StatusOK {
		h.t.Fatalf("create session: %v", r.Status)
	}
	return r
}

func (h *harness) acquire(id fsm.SessionID, lock, value string) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: lock, Value: value, SetValue: value != "", Now: now0})
}

func (h *harness) queue(id fsm.SessionID, lock, value string) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: id, Lock: lock, Value: value, SetValue: value != "", Queue: true, Now: now0})
}

func (h *harness) release(id fsm.SessionID, lock string, token uint64) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeRelease, Session: id, Lock: lock, Token: token})
}

func (h *harness) destroy(id fsm.SessionID) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeDestroySession, Session: id})
}

func (h *harness) expire(id fsm.SessionID, now int64) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeExpireSession, Session: id, Now: now})
}

func (h *harness) cancel(id fsm.SessionID, lock string) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeCancelWait, Session: id, Lock: lock})
}

func (h *harness) delayEnded(lock string, now int64) fsm.Result {
	h.t.Helper()
	return h.apply(fsm.Command{Type: fsm.TypeDelayEnded, Lock: lock, Now: now})
}

// now0 is an arbitrary leader clock reading (Unix ns) that the tests start from.
const now0 = int64(1_700_000_000_000_000_000)

// mustStatus fails the test unless r has the wanted status.
func mustStatus(t testing.TB, r fsm.Result, want fsm.Status) {
	t.Helper()
	if r.Err != nil {
		t.Fatalf("result error %v, want status %v", r.Err, want)
	}
	if r.Status != want {
		t.Fatalf("status %v, want %v (result %+v)", r.Status, want, r)
	}
}

// wantLock fails the test unless the lock reads as want (Name is filled in).
func wantLock(t testing.TB, f *fsm.FSM, want fsm.LockInfo) {
	t.Helper()
	got := f.Lock(want.Name)
	if got != want {
		t.Fatalf("lock %q:\n got %+v\nwant %+v", want.Name, got, want)
	}
}

// memSink is a raft.SnapshotSink that keeps what is written in memory.
type memSink struct {
	bytes.Buffer
	closed, cancelled bool
	failAfter         int // fail writes once this many bytes are written; 0: never
}

var _ raft.SnapshotSink = (*memSink)(nil)

var errSinkFull = errors.New("sink full")

func (s *memSink) Write(p []byte) (int, error) {
	if s.failAfter > 0 && s.Len()+len(p) > s.failAfter {
		return 0, errSinkFull
	}
	return s.Buffer.Write(p)
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Close() error  { s.closed = true; return nil }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }

// snapshotBytes snapshots f and returns the persisted bytes.
func snapshotBytes(t testing.TB, f *fsm.FSM) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatalf("persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("persist left sink closed=%v cancelled=%v", sink.closed, sink.cancelled)
	}
	return sink.Bytes()
}

// view is everything the read API shows of an FSM, for comparing two of them.
type view struct {
	Locks    []fsm.LockInfo
	Sessions []fsm.SessionInfo
	Members  []fsm.Member
	Delayed  []fsm.DelayedLock
	Stats    fsm.Stats
	Absent   fsm.LockInfo
	// The ACL state, and the sessions each owner has.
	Bootstrapped bool
	Tokens       []fsm.ACLToken
	Policies     []fsm.Policy
	Owned        map[string]int
	// Holders are the grants of each held lock.
	Holders map[string][]fsm.HolderInfo
}

func readView(f *fsm.FSM) view {
	v := view{
		Locks:        f.Locks(""),
		Sessions:     f.Sessions(),
		Members:      f.Members(),
		Delayed:      f.DelayedLocks(),
		Stats:        f.Stats(),
		Absent:       f.Lock("\x00never-used"),
		Bootstrapped: f.ACLBootstrapped(),
		Tokens:       f.ACLTokens(),
		Policies:     f.Policies(),
		Owned:        map[string]int{},
		Holders:      map[string][]fsm.HolderInfo{},
	}
	for _, l := range v.Locks {
		if hs := f.Holders(l.Name); hs != nil {
			v.Holders[l.Name] = hs
		}
	}
	for _, s := range v.Sessions {
		if s.Owner != "" {
			v.Owned[s.Owner] = f.SessionsOwnedBy(s.Owner)
		}
	}
	return v
}

func sameView(t testing.TB, got, want view) {
	t.Helper()
	if !reflect.DeepEqual(normView(got), normView(want)) {
		t.Fatalf("views differ:\n got %+v\nwant %+v", got, want)
	}
}

// normView makes empty and nil slices compare equal.
func normView(v view) view {
	if len(v.Locks) == 0 {
		v.Locks = nil
	}
	if len(v.Sessions) == 0 {
		v.Sessions = nil
	}
	for i := range v.Sessions {
		if len(v.Sessions[i].Locks) == 0 {
			v.Sessions[i].Locks = nil
		}
	}
	if len(v.Members) == 0 {
		v.Members = nil
	}
	if len(v.Delayed) == 0 {
		v.Delayed = nil
	}
	if len(v.Tokens) == 0 {
		v.Tokens = nil
	}
	if len(v.Policies) == 0 {
		v.Policies = nil
	}
	return v
}

// readCloser wraps b for Restore.
func readCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// hinted is a snapshot reader that tells a size (fsm.Sizer), right or wrong, and records
// that it was asked.
type hinted struct {
	io.Reader
	size  int64
	asked bool
}

func (h *hinted) Size() int64  { h.asked = true; return h.size }
func (h *hinted) Close() error { return nil }

// wrapped hides a reader behind raft.ReadCloserWrapper, as raft's restore does.
type wrapped struct{ io.ReadCloser }

func (w wrapped) WrappedReadCloser() io.ReadCloser { return w.ReadCloser }

// sizedReader reads b and tells size, from behind a raft-style wrapper.
func sizedReader(b []byte, size int64) (io.ReadCloser, *hinted) {
	h := &hinted{Reader: bytes.NewReader(b), size: size}
	return wrapped{h}, h
}
