package cluster

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// changeFeed is a state machine whose events feed a change log, as a node's do.
type changeFeed struct {
	t     *testing.T
	log   *changeLog
	f     *fsm.FSM
	index uint64
}

type observeFunc func([]fsm.Event)

func (o observeFunc) Observe(events []fsm.Event) { o(events) }

func newChangeFeed(t *testing.T, maxBytes int) *changeFeed {
	cf := &changeFeed{t: t, log: newChangeLog(maxBytes)}
	cf.f = fsm.New(observeFunc(cf.log.observe))
	return cf
}

func feedSession(n byte) fsm.SessionID {
	var id fsm.SessionID
	id[0], id[15] = n, 1
	return id
}

// apply applies the commands as one batch, at the next indexes.
func (cf *changeFeed) apply(cmds ...fsm.Command) {
	cf.t.Helper()
	var logs []*raft.Log
	for _, c := range cmds {
		cf.index++
		logs = append(logs, &raft.Log{Index: cf.index, Type: raft.LogCommand, Data: c.Encode(nil)})
	}
	for _, r := range cf.f.ApplyBatch(logs) {
		if err := r.(fsm.Result).Err; err != nil {
			cf.t.Fatal(err)
		}
	}
}

func feedCreate(n byte) fsm.Command {
	return fsm.Command{Type: fsm.TypeCreateSession, Session: feedSession(n), TTL: 10 * time.Second}
}

func feedAcquire(n byte, lock string) fsm.Command {
	return fsm.Command{Type: fsm.TypeAcquire, Session: feedSession(n), Lock: lock, Queue: true}
}

func feedRelease(n byte, lock string, token uint64) fsm.Command {
	return fsm.Command{Type: fsm.TypeRelease, Session: feedSession(n), Lock: lock, Token: token}
}

// summary renders changes as name@index:holder (- for free).
func summary(locks []fsm.LockView) string {
	s := ""
	for _, l := range locks {
		holder := "-"
		if l.Held {
			holder = fmt.Sprint(l.Holder[0])
		}
		s += fmt.Sprintf("%s@%d:%s ", l.Name, l.ModifyIndex, holder)
	}
	return s
}

// Every change under the prefix after the index, each as the lock was right after its command
// (a release handing the lock on and a release freeing it included), even when one batch
// applied them all; and the index to go on from.
func TestChangesAnswersEveryChangeAfterTheIndexInOrder(t *testing.T) {
	cf := newChangeFeed(t, 0)
	cf.apply(feedCreate(1), feedCreate(2)) // 1, 2
	cf.apply(feedAcquire(1, "jobs/a"), feedAcquire(2, "jobs/a"), feedAcquire(2, "other"), feedRelease(1, "jobs/a", 3),
		feedAcquire(1, "jobs/b"), feedRelease(2, "jobs/a", 6)) // 3..8, one batch
	got := cf.log.since("jobs/", 2, 100)
	want := "jobs/a@3:1 jobs/a@4:1 jobs/a@6:2 jobs/b@7:1 jobs/a@8:- "
	if got.Reset || summary(got.Locks) != want || got.Next != 8 {
		t.Fatalf("since 2: %s next %d reset %v; want %snext 8", summary(got.Locks), got.Next, got.Reset, want)
	}
	if got := cf.log.since("jobs/", 6, 100); summary(got.Locks) != "jobs/b@7:1 jobs/a@8:- " || got.Next != 8 {
		t.Fatalf("since 6: %s next %d", summary(got.Locks), got.Next)
	}
	if got := cf.log.since("jobs/", 8, 100); len(got.Locks) != 0 || got.Next != 8 || got.Reset {
		t.Fatalf("since 8: %+v", got)
	}
	// A client ahead of this node (it read another) keeps its index.
	if got := cf.log.since("jobs/", 50, 100); len(got.Locks) != 0 || got.Next != 50 || got.Reset {
		t.Fatalf("since 50: %+v", got)
	}
	// Index 0 asks for the whole state.
	if got := cf.log.since("jobs/", 0, 100); !got.Reset || got.Next != 8 {
		t.Fatalf("since 0: %+v", got)
	}
	// A command that changed no lock moves the index to go on from.
	cf.apply(feedCreate(3)) // 9
	if got := cf.log.since("jobs/", 8, 100); len(got.Locks) != 0 || got.Next != 9 {
		t.Fatalf("since 8 after a session was created: %+v", got)
	}
}

// A full answer ends at a command boundary: the changes of one command are never split, so
// the next index skips none.
func TestChangesLimitKeepsCommandsWhole(t *testing.T) {
	cf := newChangeFeed(t, 0)
	cf.apply(feedCreate(1), feedCreate(2))                                       // 1, 2
	cf.apply(feedAcquire(1, "a"), feedAcquire(1, "b"), feedAcquire(1, "c"))      // 3, 4, 5
	cf.apply(fsm.Command{Type: fsm.TypeDestroySession, Session: feedSession(1)}) // 6: a, b, c freed
	cf.apply(feedAcquire(2, "d"))                                                // 7
	got := cf.log.since("", 2, 2)
	if summary(got.Locks) != "a@3:1 b@4:1 " || got.Next != 4 {
		t.Fatalf("first page: %s next %d", summary(got.Locks), got.Next)
	}
	got = cf.log.since("", 5, 2)
	if summary(got.Locks) != "a@6:- b@6:- c@6:- " || got.Next != 6 {
		t.Fatalf("a command's changes split: %s next %d", summary(got.Locks), got.Next)
	}
	if got = cf.log.since("", 6, 2); summary(got.Locks) != "d@7:2 " || got.Next != 7 {
		t.Fatalf("last page: %s next %d", summary(got.Locks), got.Next)
	}
}

// The log keeps within its bound by forgetting the oldest changes; a watch from before what it
// remembers is told to take the whole state, one from its floor on is answered in full.
func TestChangesForgetsTheOldestAndSaysSo(t *testing.T) {
	cf := newChangeFeed(t, 10*changeEntryBytes)
	cf.apply(feedCreate(1)) // 1
	for i := range 20 {
		cf.apply(feedAcquire(1, fmt.Sprintf("l%02d", i))) // 2..21
	}
	floor, last, n := cf.log.bounds()
	if n > 10 || n < 8 || last != 21 || floor != last-uint64(n) {
		t.Fatalf("floor %d last %d entries %d; want about 10 entries ending at 21, floor just below them", floor, last, n)
	}
	if got := cf.log.since("", floor-1, 100); !got.Reset || got.Next != 21 {
		t.Fatalf("a watch from before the floor: %+v", got)
	}
	got := cf.log.since("", floor, 100)
	if got.Reset || len(got.Locks) != n || got.Locks[0].ModifyIndex != floor+1 {
		t.Fatalf("a watch from the floor: %s reset %v", summary(got.Locks), got.Reset)
	}
}

// A restore replaces the state: the changes before it are forgotten, a watch from before the
// snapshot's last change is told to take the whole state, and every watch wakes.
func TestChangesAfterARestore(t *testing.T) {
	src := newChangeFeed(t, 0)
	src.apply(feedCreate(1), feedAcquire(1, "a"), feedAcquire(1, "b"), feedRelease(1, "b", 3), feedCreate(2)) // last change 4
	snap, err := src.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memorySink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}

	cf := newChangeFeed(t, 0)
	cf.apply(feedCreate(1), feedAcquire(1, "a")) // 1, 2: a node that had applied a little
	woke := cf.log.watch("zzz")                  // a prefix no change falls under
	if err := cf.f.Restore(sink.reader()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woke:
	default:
		t.Fatal("a restore did not wake the watches")
	}
	if floor, last, n := cf.log.bounds(); floor != 4 || last != 4 || n != 0 {
		t.Fatalf("after restore: floor %d last %d entries %d; want 4, 4, 0", floor, last, n)
	}
	if got := cf.log.since("", 2, 100); !got.Reset || got.Next != 4 {
		t.Fatalf("a watch from before the snapshot's last change: %+v", got)
	}
	if got := cf.log.since("", 4, 100); got.Reset || len(got.Locks) != 0 || got.Next != 4 {
		t.Fatalf("a watch from the snapshot's last change: %+v", got)
	}
	cf.index = 5
	cf.apply(feedAcquire(2, "c")) // 6
	if got := cf.log.since("", 4, 100); summary(got.Locks) != "c@6:2 " || got.Next != 6 {
		t.Fatalf("after the restore: %s next %d", summary(got.Locks), got.Next)
	}
}

// A change wakes the watches of every prefix of its lock's name, and no other.
func TestChangeWakesOnlyThePrefixesItFallsUnder(t *testing.T) {
	cf := newChangeFeed(t, 0)
	cf.apply(feedCreate(1))
	w := map[string]<-chan struct{}{}
	for _, p := range []string{"", "jobs/", "jobs/a", "jobs/ab", "jobs/b", "other/"} {
		w[p] = cf.log.watch(p)
	}
	if cf.log.watch("jobs/") != w["jobs/"] {
		t.Fatal("two watches of one prefix do not share a channel")
	}
	cf.apply(feedAcquire(1, "jobs/a"))
	for p, ch := range w {
		closed := false
		select {
		case <-ch:
			closed = true
		default:
		}
		if want := p == "" || p == "jobs/" || p == "jobs/a"; closed != want {
			t.Errorf("prefix %q: woken %v, want %v", p, closed, want)
		}
	}
	if len(cf.log.watches) != 3 || cf.log.lengths[6] != 2 || cf.log.lengths[5] != 0 {
		t.Fatalf("woken watches not dropped: watches %d, lengths %v", len(cf.log.watches), cf.log.lengths)
	}
	cf.log.wakeAll(true)
	select {
	case <-cf.log.watch("jobs/"):
	default:
		t.Fatal("a watch taken after the node closed must be closed")
	}
}

// memorySink is a snapshot sink in memory.
type memorySink struct{ buf []byte }

func (s *memorySink) Write(p []byte) (int, error) { s.buf = append(s.buf, p...); return len(p), nil }
func (s *memorySink) Close() error                { return nil }
func (s *memorySink) ID() string                  { return "memory" }
func (s *memorySink) Cancel() error               { return nil }
func (s *memorySink) reader() io.ReadCloser       { return io.NopCloser(bytes.NewReader(s.buf)) }

// BenchmarkChangeWithManyWatches measures what one change costs the applying goroutine while
// watches wait on prefixes it does not fall under: it must not grow with their number.
func BenchmarkChangeWithManyWatches(b *testing.B) {
	for _, watches := range []int{0, 100, 10000} {
		b.Run(fmt.Sprintf("watches=%d", watches), func(b *testing.B) {
			cl := newChangeLog(0)
			for i := range watches {
				cl.watch(fmt.Sprintf("w/%05d/", i))
			}
			events := []fsm.Event{{Kind: fsm.EventLockChanged, Lock: "jobs/x", State: fsm.LockView{LockInfo: fsm.LockInfo{Name: "jobs/x"}}}}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				events[0].Index = uint64(i + 1)
				events[0].State.ModifyIndex = uint64(i + 1)
				cl.observe(events)
			}
		})
	}
}

// A restored backup is installed at an index above every one used before, while its state
// holds only changes far below the watchers' indexes: every watch from before it must be told
// to take the whole state.
func TestChangesAfterARestoredBackup(t *testing.T) {
	src := newChangeFeed(t, 0)
	src.apply(feedCreate(1), feedAcquire(1, "a")) // the backup: last change at 2
	snap, err := src.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memorySink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	cf := newChangeFeed(t, 0)
	for range 5 {
		cf.apply(feedCreate(2), feedAcquire(2, "b"), feedRelease(2, "b", cf.index+2), fsm.Command{Type: fsm.TypeDestroySession, Session: feedSession(2)})
	}
	watcherAt := cf.log.since("", 0, 100).Next // 20: a watcher that saw everything
	rc := sizedReader{ReadCloser: sink.reader(), size: int64(len(sink.buf)), index: 1_000_000_020, term: 2}
	if err := cf.f.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if got := cf.log.since("", watcherAt, 100); !got.Reset || got.Next != 1_000_000_020 {
		t.Fatalf("a watch from %d after the backup's restore: %+v; want a reset going on from the restore's index", watcherAt, got)
	}
}

// The log keeps its changes in blocks; a long run of changes, evicted block by block, must
// still answer every change after any index it holds, in order, and none it evicted.
func TestChangesAcrossManyBlocks(t *testing.T) {
	one := fsm.LockView{LockInfo: fsm.LockInfo{Name: "jobs/x"}}
	entry := changeEntryBytes + len(one.Name)
	const held = 3*changeChunk + 7
	cl := newChangeLog(held * entry)
	const total = 10*changeChunk + 3
	for i := 1; i <= total; i++ {
		v := one
		v.ModifyIndex = uint64(i)
		cl.observe([]fsm.Event{{Kind: fsm.EventLockChanged, Index: uint64(i), Lock: v.Name, State: v}})
	}
	floor, last, n := cl.bounds()
	if n != held || last != total || floor != total-held {
		t.Fatalf("floor %d last %d entries %d; want %d, %d, %d", floor, last, n, total-held, total, held)
	}
	if got := cl.since("", floor-1, total); !got.Reset {
		t.Fatalf("after %d, below the floor: %+v, want a reset", floor-1, got.Next)
	}
	for _, after := range []uint64{floor, floor + 1, floor + changeChunk - 1, floor + changeChunk, total - 1, total} {
		got := cl.since("", after, total)
		if got.Reset || len(got.Locks) != int(total-after) || got.Next != total {
			t.Fatalf("after %d: reset %v, %d changes, next %d; want %d changes, next %d", after, got.Reset, len(got.Locks), got.Next, total-after, total)
		}
		for i, l := range got.Locks {
			if want := after + uint64(i) + 1; l.ModifyIndex != want {
				t.Fatalf("after %d: change %d is at index %d, want %d", after, i, l.ModifyIndex, want)
			}
		}
	}
}
