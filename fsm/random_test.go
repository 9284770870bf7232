package fsm_test

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// TestRandomCommandsMatchModel applies long random command sequences and checks, after every
// step, the result, the events and the whole readable state against refModel, and the
// invariants against the state machine's own reads. A second state machine applies the same
// log in random batches with raft's own entries in between, and is replaced now and then by
// one restored from a snapshot; both must produce byte-identical snapshots. And a snapshot
// captured at one step and written while the following commands apply (as raft writes them)
// must hold the bytes of its step.
//
// For a longer soak: go test -run Random ./fsm -fsm.seeds=200 -fsm.steps=20000
func TestRandomCommandsMatchModel(t *testing.T) {
	steps := *randomSteps
	if testing.Short() {
		steps = min(steps, 500)
	}
	for seed := int64(1); seed <= int64(*randomSeeds); seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			t.Parallel()
			runRandom(t, seed, steps)
		})
	}
}

var (
	randomSeeds = flag.Int("fsm.seeds", 6, "seeds of TestRandomCommandsMatchModel")
	randomSteps = flag.Int("fsm.steps", 3000, "steps per seed of TestRandomCommandsMatchModel")
)

type randomRun struct {
	t       *testing.T
	rng     *rand.Rand
	m       *refModel
	g       *gen
	rec     *recorder
	a, b    *fsm.FSM // a applies one command at a time; b in batches
	pending []*raft.Log
	results []fsm.Result // a's results for the pending entries that are commands
	// lastToken is the highest token each lock was ever granted with.
	lastToken map[string]uint64
	// logged is the index of the last entry given to b's log.
	logged uint64
	// late is a snapshot of a being written while later commands apply, or nil.
	late *lateSnapshot
}

// lateSnapshot is a snapshot captured at one step and persisted by a goroutine that starts
// after the next command applied and may run on during the ones after it.
type lateSnapshot struct {
	want  []byte        // the bytes of a snapshot persisted at the capture
	start chan struct{} // closed once a later command has applied
	got   chan []byte   // what the late snapshot wrote, or nil on error
}

// captureLate captures a snapshot of a, with the bytes it must write, and persists it later.
func (r *randomRun) captureLate() {
	want := snapshotBytes(r.t, r.a)
	snap, err := r.a.Snapshot()
	if err != nil {
		r.t.Fatalf("snapshot: %v", err)
	}
	late := &lateSnapshot{want: want, start: make(chan struct{}), got: make(chan []byte, 1)}
	go func() {
		defer snap.Release()
		<-late.start
		var sink memSink
		if err := snap.Persist(&sink); err != nil {
			late.got <- nil
			return
		}
		late.got <- sink.Bytes()
	}()
	r.late = late
}

// checkLate waits for the late snapshot and checks that it wrote the state of its capture.
func (r *randomRun) checkLate() {
	late := r.late
	r.late = nil
	got := <-late.got
	if !bytes.Equal(got, late.want) {
		r.t.Fatalf("at index %d a snapshot written while commands applied wrote %d bytes, not the %d of its capture",
			r.g.index, len(got), len(late.want))
	}
}

func runRandom(t *testing.T, seed int64, steps int) {
	rng := rand.New(rand.NewSource(seed))
	m := newRefModel()
	r := &randomRun{
		t: t, rng: rng, m: m, rec: &recorder{},
		g:         &gen{rng: rng, m: m, now: now0},
		lastToken: map[string]uint64{},
	}
	r.a, r.b = fsm.New(r.rec), fsm.New(nil)
	for step := 0; step < steps; step++ {
		index, c := r.g.next()
		// Raft's own entries fill the gaps in the index sequence; only b sees them.
		for i := r.logged + 1; i < index; i++ {
			r.pending = append(r.pending, &raft.Log{Index: i, Type: raft.LogNoop})
		}
		r.logged = index
		data := c.Encode(nil)
		corrupt := rng.Intn(50) == 0
		if corrupt {
			data = corruptCommand(rng, data)
		}
		r.m.term = r.g.term
		r.step(step, index, c, data, corrupt)
		if r.late != nil {
			select {
			case <-r.late.start:
			default:
				close(r.late.start)
			}
		}
		r.pending = append(r.pending, &raft.Log{Index: index, Term: r.g.term, Type: raft.LogCommand, Data: data})
		if rng.Intn(4) == 0 || step == steps-1 {
			r.flushB()
			if r.late != nil {
				r.checkLate()
			}
			if step != steps-1 {
				r.captureLate()
			}
		}
		if step%250 == 249 {
			r.restoreB()
		}
	}
}

// corruptCommand returns bytes that cannot decode and that no version writes: truncated
// (every command ends with a complete field), or with a byte appended. (An unknown version,
// type or flag stops the node instead: TestEntryFromANewerVersionStopsTheNode.)
func corruptCommand(rng *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	if rng.Intn(2) == 0 {
		return b[:len(b)-1]
	}
	return append(b, byte(rng.Intn(256)))
}

func (r *randomRun) step(step int, index uint64, c fsm.Command, data []byte, corrupt bool) {
	t := r.t
	var want fsm.Result
	before := view{}
	readyBefore := r.m.readyQueues()
	if corrupt {
		before = readView(r.a)
	} else {
		want = r.m.apply(index, c)
	}
	r.rec.take()
	got := r.a.Apply(&raft.Log{Index: index, Term: r.g.term, Type: raft.LogCommand, Data: data}).(fsm.Result)
	r.results = append(r.results, got)
	if corrupt {
		if got.Err == nil || got.Index != index {
			t.Fatalf("step %d: corrupt command % x applied: %+v", step, data, got)
		}
		if ev := r.rec.take(); len(ev) != 0 {
			t.Fatalf("step %d: corrupt command emitted %+v", step, ev)
		}
		sameView(t, readView(r.a), before)
		return
	}
	if !sameResult(got, want) {
		t.Fatalf("step %d, index %d, %s:\n got %+v\nwant %+v", step, index, describe(c), got, want)
	}
	r.checkEvents(step, index, c, readyBefore)
	r.checkAgainstModel(step, c)
	r.checkInvariants(step)
}

func sameResult(got, want fsm.Result) bool {
	if len(got.Released) == 0 {
		got.Released = nil
	}
	if len(want.Released) == 0 {
		want.Released = nil
	}
	return reflect.DeepEqual(got, want)
}

func describe(c fsm.Command) string {
	names := map[fsm.CommandType]string{fsm.TypeCreateSession: "create", fsm.TypeDestroySession: "destroy",
		fsm.TypeExpireSession: "expire", fsm.TypeAcquire: "acquire", fsm.TypeRelease: "release",
		fsm.TypeCancelWait: "cancel-wait", fsm.TypeDelayEnded: "delay-ended", fsm.TypeSetMember: "set-member",
		fsm.TypeRemoveMember: "remove-member", fsm.TypeACLBootstrap: "acl-bootstrap", fsm.TypeACLCreateToken: "acl-create-token",
		fsm.TypeACLDeleteToken: "acl-delete-token", fsm.TypeACLSetPolicy: "acl-set-policy", fsm.TypeACLDeletePolicy: "acl-delete-policy",
		fsm.TypeEnableFeatures: "enable-features", fsm.TypeServeQueue: "serve-queue"}
	return fmt.Sprintf("%s %+v", names[c.Type], c)
}

// checkEvents checks the events of the command at index against the model; readyBefore are
// the locks whose queue was ready before it.
func (r *randomRun) checkEvents(step int, index uint64, c fsm.Command, readyBefore []string) {
	t := r.t
	events := r.rec.take()
	var grants, delays, ended []fsm.Event
	told := map[string]bool{}
	for _, e := range events {
		if e.Index != index {
			t.Fatalf("step %d: event %+v at index %d", step, e, index)
		}
		switch e.Kind {
		case fsm.EventGranted:
			grants = append(grants, e)
			// Fencing: the token is the granting index, and a lock's tokens only grow.
			if e.Token != index {
				t.Fatalf("step %d: grant %+v with token other than its index %d", step, e, index)
			}
			if e.Token <= r.lastToken[e.Lock] {
				t.Fatalf("step %d: lock %q granted token %d after %d", step, e.Lock, e.Token, r.lastToken[e.Lock])
			}
			r.lastToken[e.Lock] = e.Token
		case fsm.EventDelayStarted:
			delays = append(delays, fsm.Event{Kind: e.Kind, Lock: e.Lock, DelayUntil: e.DelayUntil, Delay: e.Delay})
		case fsm.EventSessionEnded:
			ended = append(ended, fsm.Event{Kind: e.Kind, Session: e.Session, Expired: e.Expired})
		case fsm.EventQueueReady:
			told[e.Lock] = true
		}
	}
	// A queue that became ready must be reported, or no leader would serve it.
	for _, name := range r.m.readyQueues() {
		if !slices.Contains(readyBefore, name) && !told[name] {
			t.Fatalf("step %d, %s: lock %q became ready unreported", step, describe(c), name)
		}
	}
	if got, want := r.a.ReadyQueues(), r.m.readyQueues(); !reflect.DeepEqual(got, want) {
		t.Fatalf("step %d, %s: ready queues %v, want %v", step, describe(c), got, want)
	}
	if !reflect.DeepEqual(grants, r.m.grants) {
		t.Fatalf("step %d, %s: grants\n got %+v\nwant %+v", step, describe(c), grants, r.m.grants)
	}
	if !reflect.DeepEqual(delays, r.m.delays) {
		t.Fatalf("step %d, %s: delays\n got %+v\nwant %+v", step, describe(c), delays, r.m.delays)
	}
	if !reflect.DeepEqual(ended, r.m.expired) {
		t.Fatalf("step %d, %s: ended sessions\n got %+v\nwant %+v", step, describe(c), ended, r.m.expired)
	}
}

func (r *randomRun) checkAgainstModel(step int, c fsm.Command) {
	t := r.t
	got, want := readView(r.a), r.m.view()
	if !reflect.DeepEqual(normView(got), normView(want)) {
		t.Fatalf("step %d, after %s: state differs from the model:\n got %+v\nwant %+v", step, describe(c), got, want)
	}
	for _, name := range genLocks {
		if got, want := r.a.Lock(name), r.m.lockInfo(name); got != want {
			t.Fatalf("step %d, after %s: lock %q\n got %+v\nwant %+v", step, describe(c), name, got, want)
		}
		for _, h := range r.m.holders(name) {
			if got, ok := r.a.HoldOf(name, h.Session); !ok || got != h || !r.a.IsHolderToken(name, h.Token) {
				t.Fatalf("step %d, after %s: lock %q: hold of %v %+v (%v), want %+v", step, describe(c), name, h.Session, got, ok, h)
			}
		}
		var wantQ []fsm.Waiter
		if l := r.m.locks[name]; l != nil {
			wantQ = l.queue
		}
		if gotQ := fsm.Waiters(r.a, name); len(gotQ) != len(wantQ) || (len(wantQ) > 0 && !reflect.DeepEqual(gotQ, wantQ)) {
			t.Fatalf("step %d, after %s: queue of %q\n got %v\nwant %v", step, describe(c), name, gotQ, wantQ)
		}
	}
}

// checkInvariants checks the rules on the state machine's own reads, without the model.
func (r *randomRun) checkInvariants(step int) {
	t := r.t
	f := r.a
	if err := fsm.CheckIntegrity(f); err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	live := map[fsm.SessionID]bool{}
	listed := map[string]map[fsm.SessionID]bool{} // the sessions that list each lock as held
	listings := 0
	for _, s := range f.Sessions() {
		live[s.ID] = true
		for _, name := range s.Locks {
			if listed[name] == nil {
				listed[name] = map[fsm.SessionID]bool{}
			}
			listed[name][s.ID] = true
			listings++
		}
	}
	var recount fsm.Stats
	recount.Sessions = len(live)
	grants := 0
	for _, l := range f.Locks("") {
		recount.Locks++
		recount.Waiters += l.Waiters
		holders := f.Holders(l.Name)
		if l.Held != (len(holders) > 0) {
			t.Fatalf("step %d: lock %+v with %d holders", step, l, len(holders))
		}
		if l.Held {
			recount.Held++
		}
		exclusive := 0
		for i, h := range holders {
			grants++
			if !live[h.Session] || !listed[l.Name][h.Session] {
				t.Fatalf("step %d: lock %+v: holder %v not live or not listing it", step, l, h.Session)
			}
			// A grant's token is its index: tokens of one lock only grow, and an exclusive
			// grant of a lock is its latest (nothing is granted beside it).
			if h.Token > l.ModifyIndex || h.Token > r.lastToken[l.Name] || i > 0 && h.Token <= holders[i-1].Token ||
				l.Limit == 0 && !h.Shared && h.Token != r.lastToken[l.Name] {
				t.Fatalf("step %d: lock %+v: holder %d token %d out of order or not the latest %d", step, l, i, h.Token, r.lastToken[l.Name])
			}
			if !h.Shared {
				exclusive++
			}
		}
		// Mutual exclusion: within a semaphore's limit; an exclusive holder alone.
		if l.Limit > 0 && len(holders) > int(l.Limit) || l.Limit == 0 && exclusive > 0 && len(holders) > 1 {
			t.Fatalf("step %d: lock %+v held by %d sessions, %d exclusively", step, l, len(holders), exclusive)
		}
		if len(listed[l.Name]) != len(holders) {
			t.Fatalf("step %d: lock %+v listed by %d sessions, held by %d", step, l, len(listed[l.Name]), len(holders))
		}
		seen := map[fsm.SessionID]bool{}
		for _, w := range fsm.Waiters(f, l.Name) {
			if seen[w.Session] || !live[w.Session] || listed[l.Name][w.Session] {
				t.Fatalf("step %d: lock %+v: bad queue entry %v (dup %v, live %v)", step, l, w.Session, seen[w.Session], live[w.Session])
			}
			seen[w.Session] = true
		}
	}
	if listings != grants {
		t.Fatalf("step %d: sessions list %d held locks, locks say %d", step, listings, grants)
	}
	if st := f.Stats(); st != recount {
		t.Fatalf("step %d: stats %+v, recount %+v", step, st, recount)
	}
}

// flushB applies the pending entries to b in one batch and checks that b agrees with a.
func (r *randomRun) flushB() {
	t := r.t
	if len(r.pending) == 0 {
		return
	}
	out := r.b.ApplyBatch(r.pending)
	k := 0
	for i, l := range r.pending {
		if l.Type != raft.LogCommand {
			if out[i] != nil {
				t.Fatalf("batch result for a %v entry: %+v", l.Type, out[i])
			}
			continue
		}
		got := out[i].(fsm.Result)
		want := r.results[k]
		k++
		if (got.Err == nil) != (want.Err == nil) {
			t.Fatalf("index %d: batch result %+v, single %+v", l.Index, got, want)
		}
		got.Err, want.Err = nil, nil
		if !sameResult(got, want) {
			t.Fatalf("index %d: batch result %+v, single %+v", l.Index, got, want)
		}
	}
	r.pending, r.results = r.pending[:0], r.results[:0]
	sa, sb := snapshotBytes(t, r.a), snapshotBytes(t, r.b)
	if !bytes.Equal(sa, sb) {
		t.Fatalf("at index %d the same log gave different snapshots (%d and %d bytes)", r.g.index, len(sa), len(sb))
	}
}

// restoreB replaces b by a state machine restored from a's snapshot, which must read the
// same and, as the run goes on, keep behaving the same.
func (r *randomRun) restoreB() {
	t := r.t
	r.flushB()
	snap := snapshotBytes(t, r.a)
	c := fsm.New(nil)
	if err := c.Restore(readCloser(snap)); err != nil {
		t.Fatalf("restore: %v", err)
	}
	sameView(t, readView(c), readView(r.a))
	for _, name := range genLocks {
		if got, want := fsm.Waiters(c, name), fsm.Waiters(r.a, name); !reflect.DeepEqual(got, want) {
			t.Fatalf("restored queue of %q %v, want %v", name, got, want)
		}
	}
	if err := fsm.CheckIntegrity(c); err != nil {
		t.Fatalf("restored state: %v", err)
	}
	if again := snapshotBytes(t, c); !bytes.Equal(again, snap) {
		t.Fatal("a restored state snapshots to different bytes")
	}
	r.b = c
}
