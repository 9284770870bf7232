package fsm_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand"
	"reflect"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// randomState applies steps random commands from the test generator to a new FSM.
func randomState(t testing.TB, seed int64, steps int) (*fsm.FSM, *gen) {
	rng := rand.New(rand.NewSource(seed))
	g := &gen{rng: rng, m: newRefModel(), now: now0}
	f := fsm.New(nil)
	for i := 0; i < steps; i++ {
		index, c := g.next()
		g.m.apply(index, c)
		if r := f.ApplyCommand(index, c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	return f, g
}

// richState applies at least steps random commands, then goes on until some locks are held,
// awaited and delayed at once, so that a snapshot has every kind of record.
func richState(t testing.TB, seed int64, steps int) (*fsm.FSM, *gen) {
	f, g := randomState(t, seed, steps)
	for i := 0; ; i++ {
		if st := f.Stats(); st.Held >= 2 && st.Waiters >= 2 && len(f.DelayedLocks()) > 0 && len(f.Members()) > 0 {
			return f, g
		}
		if i == 100000 {
			t.Fatalf("seed %d: no rich state after %d steps", seed, steps+i)
		}
		index, c := g.next()
		g.m.apply(index, c)
		f.ApplyCommand(index, c)
	}
}

// sameState fails unless a and b read the same, queues included.
func sameState(t testing.TB, a, b *fsm.FSM) {
	t.Helper()
	sameView(t, readView(a), readView(b))
	for _, name := range genLocks {
		if qa, qb := fsm.Waiters(a, name), fsm.Waiters(b, name); !reflect.DeepEqual(qa, qb) {
			t.Fatalf("queue of %q: %v and %v", name, qa, qb)
		}
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		f, g := richState(t, seed, 800)
		snap := snapshotBytes(t, f)
		r := fsm.New(nil)
		if err := r.Restore(readCloser(snap)); err != nil {
			t.Fatalf("seed %d: restore: %v", seed, err)
		}
		sameState(t, r, f)
		if err := fsm.CheckIntegrity(r); err != nil {
			t.Fatalf("seed %d: restored state: %v", seed, err)
		}
		if again := snapshotBytes(t, r); !bytes.Equal(again, snap) {
			t.Fatalf("seed %d: re-snapshot differs (%d and %d bytes)", seed, len(again), len(snap))
		}
		// The restored state keeps behaving like the original: its derived data (each
		// session's held and awaited locks, the counters) was rebuilt correctly.
		for i := 0; i < 400; i++ {
			index, c := g.next()
			ra, rb := f.ApplyCommand(index, c), r.ApplyCommand(index, c)
			if !sameResult(ra, rb) {
				t.Fatalf("seed %d: after restore, %s gives %+v, original %+v", seed, describe(c), rb, ra)
			}
		}
		sameState(t, r, f)
		if !bytes.Equal(snapshotBytes(t, r), snapshotBytes(t, f)) {
			t.Fatalf("seed %d: original and restored state diverged", seed)
		}
	}
}

// A size hint only saves copying: Restore must find it behind raft's wrapper, and a wrong one
// must not cut the snapshot short or pad it.
func TestRestoreReadsTheWholeSnapshotWhateverItsSizeHint(t *testing.T) {
	f, _ := richState(t, 4, 300)
	snap := snapshotBytes(t, f)
	for _, size := range []int64{-1, 0, 1, int64(len(snap)) / 2, int64(len(snap)) - 1, int64(len(snap)),
		int64(len(snap)) + 1, 4 * int64(len(snap)), 1 << 40} {
		r := fsm.New(nil)
		rc, hint := sizedReader(snap, size)
		if err := r.Restore(rc); err != nil {
			t.Fatalf("size hint %d of %d bytes: %v", size, len(snap), err)
		}
		if !hint.asked {
			t.Fatalf("size hint %d: Restore did not look behind the wrapper for it", size)
		}
		sameState(t, r, f)
	}
}

func TestSnapshotOfEmptyStateRoundTrips(t *testing.T) {
	snap := snapshotBytes(t, fsm.New(nil))
	r := fsm.New(nil)
	if err := r.Restore(readCloser(snap)); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st != (fsm.Stats{}) {
		t.Fatalf("stats %+v", st)
	}
	if !bytes.Equal(snapshotBytes(t, r), snap) {
		t.Fatal("empty snapshot does not round trip")
	}
}

func TestRestoreReplacesTheWholeState(t *testing.T) {
	src := newHarness(t)
	src.create(sid(1))
	g := src.acquire(sid(1), "kept", "")
	src.acquire(sid(1), "freed", "")
	src.release(sid(1), "freed", g.Token+1)
	src.apply(fsm.Command{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "n1"}})
	snap := snapshotBytes(t, src.f)

	dst, _ := randomState(t, 9, 300)
	if err := dst.Restore(readCloser(snap)); err != nil {
		t.Fatal(err)
	}
	sameState(t, dst, src.f)
	if err := fsm.CheckIntegrity(dst); err != nil {
		t.Fatal(err)
	}
	if l := dst.Lock("anything"); l.ModifyIndex != 4 {
		t.Fatalf("freed index after restore %d, want 4", l.ModifyIndex)
	}
}

func TestSnapshotIsPointInTime(t *testing.T) {
	h := newHarness(t)
	a, b, c := sid(1), sid(2), sid(3)
	for _, id := range []fsm.SessionID{a, b, c} {
		h.create(id)
	}
	g := h.acquire(a, "L", "va")
	h.queue(b, "L", "vb")
	h.queue(c, "L", "vc")
	want := snapshotBytes(t, h.f)
	snap, err := h.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Change everything the capture holds, queues in place included, before it is written.
	h.cancel(b, "L")
	h.queue(b, "L", "vb2")
	h.release(a, "L", g.Token)
	h.destroy(a)
	h.create(sid(4))
	h.apply(fsm.Command{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "n1"}})
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("the snapshot shows changes applied after it was taken")
	}
}

func TestPersistCancelsTheSinkOnWriteError(t *testing.T) {
	f, _ := randomState(t, 1, 500)
	full := len(snapshotBytes(t, f))
	for _, limit := range []int{1, full / 2, full - 1} {
		snap, _ := f.Snapshot()
		sink := memSink{failAfter: limit}
		if err := snap.Persist(&sink); !errors.Is(err, errSinkFull) {
			t.Fatalf("persist into a sink that fails after %d of %d bytes: %v", limit, full, err)
		}
		if !sink.cancelled || sink.closed {
			t.Fatalf("failed persist: cancelled=%v closed=%v, want cancelled only", sink.cancelled, sink.closed)
		}
	}
}

// damagedRestore restores b into an FSM that holds a state of its own, and checks that it is
// refused and that the state and the observer saw nothing.
func damagedRestore(t *testing.T, h *harness, before []byte, b []byte, what string) error {
	t.Helper()
	h.rec.take()
	err := h.f.Restore(readCloser(b))
	if err == nil {
		t.Fatalf("%s: restore accepted", what)
	}
	if !bytes.Equal(snapshotBytes(t, h.f), before) {
		t.Fatalf("%s: refused restore changed the state", what)
	}
	if ev := h.rec.take(); len(ev) != 0 {
		t.Fatalf("%s: refused restore emitted %+v", what, ev)
	}
	return err
}

func TestRestoreRefusesDamagedSnapshots(t *testing.T) {
	src, _ := richState(t, 2, 200)
	good := snapshotBytes(t, src)
	h := newHarness(t)
	h.create(sid(1))
	h.acquire(sid(1), "mine", "v")
	before := snapshotBytes(t, h.f)

	for n := 0; n < len(good); n++ {
		damagedRestore(t, h, before, good[:n], "truncated")
	}
	for i := 0; i < len(good); i++ {
		for bit := 0; bit < 8; bit++ {
			b := append([]byte(nil), good...)
			b[i] ^= 1 << bit
			err := damagedRestore(t, h, before, b, "bit flip")
			if i >= 7 && i < len(good)-4 && !errors.Is(err, fsm.ErrSnapshotChecksum) {
				t.Fatalf("flip of bit %d of byte %d: %v, want a checksum error", bit, i, err)
			}
		}
	}
	damagedRestore(t, h, before, append(append([]byte(nil), good...), 0), "trailing byte")
	wrongVersion := append([]byte(nil), good...)
	wrongVersion[6] = 8
	// A version after this one's is a newer raftlock's: refused as needing it (the agent exits
	// saying so), which a version 0 is not.
	if err := damagedRestore(t, h, before, wrongVersion, "version 8"); !errors.Is(err, fsm.ErrSnapshotVersion) || !errors.Is(err, fsm.ErrNewerFormat) {
		t.Fatalf("version 8: %v", err)
	}
	wrongVersion[6] = 0
	if err := damagedRestore(t, h, before, wrongVersion, "version 0"); !errors.Is(err, fsm.ErrSnapshotVersion) || errors.Is(err, fsm.ErrNewerFormat) {
		t.Fatalf("version 0: %v", err)
	}
	if err := damagedRestore(t, h, before, []byte("{\"sessions\": []}"), "JSON"); !errors.Is(err, fsm.ErrSnapshotMagic) {
		t.Fatalf("JSON: %v", err)
	}
	errRead := errors.New("disk on fire")
	r := io.MultiReader(bytes.NewReader(good[:len(good)/2]), errReader{errRead})
	if err := h.f.Restore(io.NopCloser(r)); !errors.Is(err, errRead) {
		t.Fatalf("restore from a failing reader: %v", err)
	}
	if !bytes.Equal(snapshotBytes(t, h.f), before) {
		t.Fatal("failed read changed the state")
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestRestoreClosesItsReader(t *testing.T) {
	good := snapshotBytes(t, fsm.New(nil))
	for _, b := range [][]byte{good, good[:3]} {
		rc := &closeRecorder{Reader: bytes.NewReader(b)}
		_ = fsm.New(nil).Restore(rc)
		if !rc.closed {
			t.Fatalf("Restore of %d bytes left the reader open", len(b))
		}
	}
}

func TestTokensKeepGrowingAfterRestore(t *testing.T) {
	h := newHarness(t)
	h.create(sid(1))
	h.create(sid(2))
	g := h.acquire(sid(1), "L", "")
	h.queue(sid(2), "L", "")
	r := fsm.New(nil)
	if err := r.Restore(readCloser(snapshotBytes(t, h.f))); err != nil {
		t.Fatal(err)
	}
	// The log goes on after the snapshot's last index; the handoff token is that new index.
	next := h.index + 1
	res := r.ApplyCommand(next, fsm.Command{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: g.Token})
	mustStatus(t, res, fsm.StatusOK)
	if l := r.Lock("L"); l.Holder != sid(2) || l.Token != next || l.Token <= g.Token {
		t.Fatalf("after restore and release: %+v", l)
	}
}

// FuzzRestore feeds Restore arbitrary bytes, both as they come (the checksum stops nearly all)
// and wrapped in a valid header (of each format version) and checksum so that the record
// decoder sees them. Restore
// must never panic; a state it accepts must be consistent, and snapshot and restore again to
// the same bytes.
func FuzzRestore(f *testing.F) {
	f.Add(snapshotBytes(f, fsm.New(nil)))
	f.Add(snapshotBytes(f, fuzzState(f).f))
	small, _ := richState(f, 3, 60)
	f.Add(snapshotBytes(f, small))
	f.Fuzz(func(t *testing.T, b []byte) {
		restoreMustNotPanic(t, b)
		if len(b) >= 7 {
			for version := byte(1); version <= 6; version++ {
				restoreMustNotPanic(t, withChecksum(version, b[7:]))
			}
		}
	})
}

func restoreMustNotPanic(t *testing.T, b []byte) {
	f := fsm.New(nil)
	if err := f.Restore(readCloser(b)); err != nil {
		return
	}
	if err := fsm.CheckIntegrity(f); err != nil {
		t.Fatalf("accepted an inconsistent state: %v", err)
	}
	snap := snapshotBytes(t, f)
	g := fsm.New(nil)
	if err := g.Restore(readCloser(snap)); err != nil {
		t.Fatalf("restore of a re-snapshot: %v", err)
	}
	if !bytes.Equal(snapshotBytes(t, g), snap) {
		t.Fatal("re-snapshot does not round trip")
	}
	// The accepted state must be usable: expire every session, which touches every lock.
	for i, s := range f.Sessions() {
		f.ApplyCommand(uint64(1<<40+i), fsm.Command{Type: fsm.TypeExpireSession, Session: s.ID, Now: now0})
	}
	if err := fsm.CheckIntegrity(f); err != nil {
		t.Fatalf("after expiring every session: %v", err)
	}
}

// withChecksum wraps body in the header of the given format version and appends its CRC-32C.
func withChecksum(version byte, body []byte) []byte {
	b := append([]byte("RLSNAP"), version)
	b = append(b, body...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}
