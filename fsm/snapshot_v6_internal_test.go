package fsm

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"
)

// validRaw6 is a consistent state of version 6: lock a held by s1 with s2 waiting; b under a
// delay from before the feature (unnamed) with s3 waiting; r held shared by s2 and s3 with a
// shared delay, a writer (s4) waiting and a reader (s5) behind it; s a semaphore of 3 with
// two permits held (s1, s4), one delayed and s5 waiting.
func validRaw6() rawSnap {
	return rawSnap{
		version: 6,
		freed:   9,
		sessions: []session{
			{id: id(1), ttl: 10 * time.Second, createIndex: 1},
			{id: id(2), ttl: 5 * time.Second, createIndex: 2},
			{id: id(3), ttl: 5 * time.Second, createIndex: 3},
			{id: id(4), ttl: 5 * time.Second, createIndex: 5},
			{id: id(5), ttl: 5 * time.Second, createIndex: 6},
		},
		locks: []rawLock{
			{name: "a", grants: []HolderInfo{{Session: id(1), Token: 4, Value: "v"}}, modify: 7,
				waiters: []waiter{{session: id(2), value: "w"}}},
			{name: "b", modify: 8, delays: []lockDelay{{until: 1e18, length: time.Second}}, waiters: []waiter{{session: id(3)}}},
			{name: "r", grants: []HolderInfo{{Session: id(2), Token: 10}, {Session: id(3), Token: 12, Value: "x"}},
				modify: 16, sharedFlag: 1, delays: []lockDelay{{until: 2e18, length: time.Second, index: 11}},
				waiters: []waiter{{session: id(4)}, {session: id(5), shared: true}}},
			{name: "s", grants: []HolderInfo{{Session: id(1), Token: 13}, {Session: id(4), Token: 15}}, modify: 17, limit: 3,
				delays: []lockDelay{{until: 3e18, length: 2 * time.Second, index: 14}}, waiters: []waiter{{session: id(5), value: "q"}}},
		},
		members: []Member{{"n1", "r1", "h1"}},
		// Every feature but grant-times, which writes version 7.
		features: slices.DeleteFunc(AllFeatures(), func(f Feature) bool { return f == FeatureGrantTimes }),
	}
}

func TestSnapshotV6FormatIsPinned(t *testing.T) {
	raw := validRaw6().bytes()
	st, err := readSnapshot(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("valid raw snapshot refused: %v", err)
	}
	var out bytes.Buffer
	if err := captureSnapshot(st).write(&out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), raw) {
		t.Fatalf("write no longer produces format version 6:\n got % x\nwant % x", out.Bytes(), raw)
	}
	if st.held != 3 || st.waiters != 5 {
		t.Fatalf("restored counters held=%d waiters=%d", st.held, st.waiters)
	}
	r := st.locks["r"]
	if r.holds() != 2 || !r.shared() || r.holdOf(id(3)) != 1 || !r.fits(true) || r.fits(false) {
		t.Fatalf("restored r: %d holds, shared %v", r.holds(), r.shared())
	}
	s := st.locks["s"]
	if s.limit() != 3 || s.holds() != 2 || len(s.x.delays) != 1 || s.x.delays[0].index != 14 || s.fits(false) {
		t.Fatalf("restored s: limit %d, %d holds, delays %+v", s.limit(), s.holds(), s.x.delays)
	}
	if got := st.sessions[id(4)].heldNames(); !slices.Equal(got, []string{"s"}) {
		t.Fatalf("s4 holds %v", got)
	}
	if st.locks["a"].x != nil {
		t.Fatal("a plain lock restored with an extension")
	}
}

// A snapshot is written in the oldest version that holds what is enabled: 4 without features,
// 5 with others, 6 once semaphores-rwlocks is enabled, 7 once grant-times is too.
func TestSnapshotVersionFollowsTheFeatures(t *testing.T) {
	st := newState()
	version := func() byte {
		var out bytes.Buffer
		if err := captureSnapshot(st).write(&out); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()[len(snapshotMagic)]
	}
	if v := version(); v != 4 {
		t.Fatalf("no features: version %d", v)
	}
	st.features = st.features.with([]Feature{FeatureAttemptNumbers})
	if v := version(); v != 5 {
		t.Fatalf("attempt-numbers: version %d", v)
	}
	st.features = st.features.with([]Feature{FeatureSemaphoresRWLocks})
	if v := version(); v != 6 {
		t.Fatalf("semaphores-rwlocks: version %d", v)
	}
	st.features = st.features.with([]Feature{FeatureGrantTimes})
	if v := version(); v != 7 {
		t.Fatalf("grant-times: version %d", v)
	}
}

func TestRestoreRefusesInconsistentV6Snapshots(t *testing.T) {
	cases := map[string]func(r *rawSnap){
		"limit 1":          func(r *rawSnap) { r.locks[0].limit = 1 },
		"limit too high":   func(r *rawSnap) { r.locks[3].limit = MaxLimit + 1 },
		"over the limit":   func(r *rawSnap) { r.locks[3].limit = 2 },
		"shared semaphore": func(r *rawSnap) { r.locks[3].sharedFlag = 1 },
		"bad shared flag":  func(r *rawSnap) { r.locks[2].sharedFlag = 2 },
		"two exclusive grants": func(r *rawSnap) {
			r.locks[2].sharedFlag, r.locks[2].delays = 0, nil
		},
		"exclusive grant and delay": func(r *rawSnap) {
			r.locks[0].delays = []lockDelay{{until: 5, index: 6}}
		},
		"shared without anything": func(r *rawSnap) {
			r.locks[1].sharedFlag, r.locks[1].delays = 1, nil
			r.locks[1].waiters = []waiter{{session: id(3), shared: true}, {session: id(4)}}
		},
		"tokens out of order": func(r *rawSnap) { r.locks[2].grants[1].Token = 9 },
		"token after modify":  func(r *rawSnap) { r.locks[3].grants[1].Token = 18 },
		"held twice":          func(r *rawSnap) { r.locks[2].grants[1].Session = id(2) },
		"holder queued":       func(r *rawSnap) { r.locks[2].waiters[1].session = id(2) },
		"unnamed delay beside another": func(r *rawSnap) {
			r.locks[2].delays = append(r.locks[2].delays, lockDelay{until: 7, length: time.Second})
		},
		"delays out of order": func(r *rawSnap) {
			r.locks[2].delays = append(r.locks[2].delays, lockDelay{until: 7, index: 11})
		},
		"delay named after modify": func(r *rawSnap) { r.locks[3].delays[0].index = 18 },
		"delay ending at zero":     func(r *rawSnap) { r.locks[3].delays[0].until = 0 },
		"shared waiter of a semaphore": func(r *rawSnap) {
			r.locks[3].waiters[0].shared = true
		},
		"exclusive waiter that fits": func(r *rawSnap) {
			r.locks[2].grants, r.locks[2].delays, r.locks[2].sharedFlag = nil, nil, 0
		},
		"idle": func(r *rawSnap) {
			r.locks[1].delays, r.locks[1].waiters = nil, nil
		},
		"grant of an unknown session": func(r *rawSnap) { r.locks[3].grants[1].Session = id(9) },
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			r := validRaw6()
			damage(&r)
			_, err := readSnapshot(bytes.NewReader(r.bytes()))
			if !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("restore: %v, want ErrSnapshotCorrupt", err)
			}
		})
	}
	// A shared waiter, or a semaphore's, may wait for its ServeQueue with its grant fitting.
	ok := validRaw6()
	ok.locks[2].waiters = ok.locks[2].waiters[1:]
	if _, err := readSnapshot(bytes.NewReader(ok.bytes())); err != nil {
		t.Fatalf("a ready shared waiter refused: %v", err)
	}
}

// A snapshot of version 5 (one holder and at most one delay per lock) restores under this
// version, and is written as version 6 once the feature is enabled, its delay unnamed.
func TestVersion5SnapshotRestores(t *testing.T) {
	old := validRaw()
	old.version, old.features = 5, []Feature{FeatureAttemptNumbers}
	st, err := readSnapshot(bytes.NewReader(old.bytes()))
	if err != nil {
		t.Fatalf("version 5 refused: %v", err)
	}
	var out bytes.Buffer
	if err := captureSnapshot(st).write(&out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), old.bytes()) {
		t.Fatalf("version 5 rewritten as\n% x\nwant\n% x", out.Bytes(), old.bytes())
	}
	st.features = st.features.with([]Feature{FeatureSemaphoresRWLocks})
	out.Reset()
	if err := captureSnapshot(st).write(&out); err != nil {
		t.Fatal(err)
	}
	again, err := readSnapshot(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatalf("version 6 of it refused: %v", err)
	}
	if x := again.locks["b"].x; x == nil || len(x.delays) != 1 || x.delays[0] != (lockDelay{until: 1e18, length: time.Second}) {
		t.Fatalf("delay after the upgrade: %+v", x)
	}
	if l := again.locks["a"]; l.holds() != 1 || l.grants()[0].session != id(1) || l.grants()[0].token != 4 || l.x != nil {
		t.Fatalf("lock a after the upgrade: %+v", l)
	}
}
