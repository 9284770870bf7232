package fsm_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// Benchmarks of the state machine (issue 5, "Go benchmarks"). The large state they share is
// built on first use, so plain `go test` never pays for it:
//
//	go test -run='^$' -bench=. -benchtime=1x ./fsm                  # everything once
//	go test -run='^$' -bench='Apply|Encode|Decode' ./fsm             # per-command figures
//	go test -run='^$' -bench=Snapshot -benchtime=3x ./fsm

const (
	bigLocks    = 1_000_000
	bigSessions = 100_000
)

// bigLockName is a lock name of a realistic length (12 bytes).
func bigLockName(i int) string { return fmt.Sprintf("jobs/%07d", i) }

// scrambledLockName names lock i after the (i*618,033 mod 1,000,000)th of bigLockName: a
// permutation of the first 1,000,000 names (618,033 and 10^6 are coprime) whose ascending runs
// are at most two names long.
func scrambledLockName(i int) string { return bigLockName(i * 618_033 % bigLocks) }

func bigSID(i int) fsm.SessionID {
	var id fsm.SessionID
	id[0] = 0xB0
	id[12], id[13], id[14], id[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	return id
}

// buildBig applies the commands that create sessions sessions and hand locks locks out to
// them round robin (lock i to session i mod sessions), and returns the next free index.
func buildBig(tb testing.TB, f *fsm.FSM, sessions, locks int) uint64 {
	return buildBigNamed(tb, f, sessions, locks, bigLockName)
}

// buildBigNamed is buildBig with the name of lock i given by name.
func buildBigNamed(tb testing.TB, f *fsm.FSM, sessions, locks int, name func(int) string) uint64 {
	index := uint64(0)
	for i := 0; i < sessions; i++ {
		index++
		r := f.ApplyCommand(index, fsm.Command{Type: fsm.TypeCreateSession, Session: bigSID(i), Name: "worker", TTL: 10 * time.Second})
		if r.Status != fsm.StatusOK {
			tb.Fatalf("create: %+v", r)
		}
	}
	for i := 0; i < locks; i++ {
		index++
		r := f.ApplyCommand(index, fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(i % sessions), Lock: name(i), Now: now0})
		if r.Status != fsm.StatusOK {
			tb.Fatalf("acquire: %+v", r)
		}
	}
	return index + 1
}

// builtState is a large state machine and its snapshot, built once per test binary.
type builtState struct {
	once sync.Once
	f    *fsm.FSM
	snap []byte
}

// big holds 1,000,000 locks among 100,000 sessions; few holds them among 64 sessions, the
// shape of a few busy services each holding many locks.
var big, few builtState

func (s *builtState) get(b *testing.B, sessions int) (*fsm.FSM, []byte) {
	s.once.Do(func() {
		s.f = fsm.New(nil)
		// The locks are created out of name order, so that nothing in the state machine is in
		// name order by chance, and a snapshot pays for sorting the names in full.
		buildBigNamed(b, s.f, sessions, bigLocks, scrambledLockName)
		s.snap = snapshotBytes(b, s.f)
	})
	if s.f == nil {
		b.Fatal("building the large state failed earlier")
	}
	return s.f, s.snap
}

// bigState returns a state machine with 1,000,000 held locks and 100,000 sessions, and its
// snapshot.
func bigState(b *testing.B) (*fsm.FSM, []byte) { return big.get(b, bigSessions) }

// preEncoded holds the log entries of a benchmark, encoded before the timer starts.
func preEncoded(first uint64, cmds []fsm.Command) []*raft.Log {
	logs := make([]*raft.Log, len(cmds))
	for i := range cmds {
		logs[i] = &raft.Log{Index: first + uint64(i), Type: raft.LogCommand, Data: cmds[i].Encode(nil)}
	}
	return logs
}

// applyAll applies logs one by one, as raft does without batching, and checks each status.
func applyAll(b *testing.B, f *fsm.FSM, logs []*raft.Log, want fsm.Status) {
	b.ReportAllocs()
	b.ResetTimer()
	for _, l := range logs {
		if r := f.Apply(l).(fsm.Result); r.Status != want || r.Err != nil {
			b.Fatalf("index %d: %+v, want %v", l.Index, r, want)
		}
	}
}

func BenchmarkApplyCreateSession(b *testing.B) {
	f := fsm.New(nil)
	cmds := make([]fsm.Command, b.N)
	for i := range cmds {
		cmds[i] = fsm.Command{Type: fsm.TypeCreateSession, Session: bigSID(i), Name: "worker-7", TTL: 10 * time.Second}
	}
	applyAll(b, f, preEncoded(1, cmds), fsm.StatusOK)
}

// BenchmarkApplyAcquire grants free locks, spread over 1,000 sessions.
func BenchmarkApplyAcquire(b *testing.B) {
	f := fsm.New(nil)
	next := buildBig(b, f, 1000, 0)
	cmds := make([]fsm.Command, b.N)
	for i := range cmds {
		cmds[i] = fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(i % 1000), Lock: bigLockName(i), Value: "host-a:8080", SetValue: true, Now: now0}
	}
	applyAll(b, f, preEncoded(next, cmds), fsm.StatusOK)
}

// BenchmarkApplyAcquireHeld is a try-acquire refused because another session holds the lock.
func BenchmarkApplyAcquireHeld(b *testing.B) {
	f := fsm.New(nil)
	next := buildBig(b, f, 1000, 1000)
	cmds := make([]fsm.Command, b.N)
	for i := range cmds {
		cmds[i] = fsm.Command{Type: fsm.TypeAcquire, Session: bigSID((i + 1) % 1000), Lock: bigLockName(i % 1000), Now: now0}
	}
	applyAll(b, f, preEncoded(next, cmds), fsm.StatusLockHeld)
}

// BenchmarkApplyAcquireQueued is b.N sessions joining the queue of one held lock, as the
// candidates of an election do.
func BenchmarkApplyAcquireQueued(b *testing.B) {
	f := fsm.New(nil)
	next := buildBig(b, f, b.N+1, 0)
	f.ApplyCommand(next, fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(b.N), Lock: "leader", Now: now0})
	cmds := make([]fsm.Command, b.N)
	for i := range cmds {
		cmds[i] = fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(i), Lock: "leader", Value: "host:8080", SetValue: true, Queue: true, Now: now0}
	}
	applyAll(b, f, preEncoded(next+1, cmds), fsm.StatusQueued)
}

// BenchmarkApplyRelease releases locks that nobody waits for.
func BenchmarkApplyRelease(b *testing.B) {
	f := fsm.New(nil)
	buildBig(b, f, 1000, b.N)
	cmds := make([]fsm.Command, b.N)
	for i := range cmds {
		// buildBig granted lock i at index 1000+1+i.
		cmds[i] = fsm.Command{Type: fsm.TypeRelease, Session: bigSID(i % 1000), Lock: bigLockName(i), Token: uint64(1000 + 1 + i)}
	}
	applyAll(b, f, preEncoded(uint64(1000+b.N+1), cmds), fsm.StatusOK)
}

// BenchmarkApplyReleaseHandoff releases one lock that b.N sessions queue for: every release
// grants the lock to the next waiter in the same command.
func BenchmarkApplyReleaseHandoff(b *testing.B) {
	f := fsm.New(nil)
	n := b.N + 1
	next := buildBig(b, f, n, 0)
	for i := 0; i < n; i++ {
		r := f.ApplyCommand(next, fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(i), Lock: "contended", Queue: true, Now: now0})
		if i == 0 && r.Status != fsm.StatusOK || i > 0 && r.Status != fsm.StatusQueued {
			b.Fatalf("setup: %+v", r)
		}
		next++
	}
	token := next - uint64(n) // the first session's grant
	cmds := make([]fsm.Command, b.N)
	for i := range cmds {
		cmds[i] = fsm.Command{Type: fsm.TypeRelease, Session: bigSID(i), Lock: "contended", Token: token}
		token = next + uint64(i) // the index of this release is the next holder's token
	}
	applyAll(b, f, preEncoded(next, cmds), fsm.StatusOK)
	b.StopTimer()
	if l := f.Lock("contended"); l.Holder != bigSID(b.N) || l.Waiters != 0 {
		b.Fatalf("after %d handoffs: %+v", b.N, l)
	}
}

// BenchmarkApplyExpireSession expires sessions that each hold one lock with one waiter.
func BenchmarkApplyExpireSession(b *testing.B) {
	f := fsm.New(nil)
	next := buildBig(b, f, 2*b.N, b.N) // session i holds lock i for i < b.N
	for i := 0; i < b.N; i++ {
		f.ApplyCommand(next, fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(b.N + i), Lock: bigLockName(i), Queue: true, Now: now0})
		next++
	}
	cmds := make([]fsm.Command, b.N)
	for i := range cmds {
		cmds[i] = fsm.Command{Type: fsm.TypeExpireSession, Session: bigSID(i), Now: now0}
	}
	applyAll(b, f, preEncoded(next, cmds), fsm.StatusOK)
}

// BenchmarkApplyBatch is acquire and release pairs through ApplyBatch, 64 entries a batch, as
// raft delivers them under load with BatchingFSM.
func BenchmarkApplyBatch(b *testing.B) {
	f := fsm.New(nil)
	next := buildBig(b, f, 1000, 0)
	cmds := make([]fsm.Command, 0, 2*b.N)
	for i := 0; i < b.N; i++ {
		s := bigSID(i % 1000)
		cmds = append(cmds,
			fsm.Command{Type: fsm.TypeAcquire, Session: s, Lock: bigLockName(i % 1000), Now: now0},
			fsm.Command{Type: fsm.TypeRelease, Session: s, Lock: bigLockName(i % 1000), Token: next + uint64(len(cmds))})
	}
	logs := preEncoded(next, cmds)
	b.ReportAllocs()
	b.ResetTimer()
	for len(logs) > 0 {
		n := min(64, len(logs))
		for _, r := range f.ApplyBatch(logs[:n]) {
			if r.(fsm.Result).Status != fsm.StatusOK {
				b.Fatalf("%+v", r)
			}
		}
		logs = logs[n:]
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/command")
}

// benchCommands is one typical command of each type.
var benchCommands = []struct {
	name string
	c    fsm.Command
}{
	{"create-session", fsm.Command{Type: fsm.TypeCreateSession, Session: sid(1), Name: "worker-7", TTL: 10 * time.Second}},
	{"destroy-session", fsm.Command{Type: fsm.TypeDestroySession, Session: sid(1)}},
	{"expire-session", fsm.Command{Type: fsm.TypeExpireSession, Session: sid(1), Now: now0}},
	{"acquire", fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "jobs/nightly", Value: "host-a:8080", SetValue: true, Queue: true, Now: now0}},
	{"release", fsm.Command{Type: fsm.TypeRelease, Session: sid(1), Lock: "jobs/nightly", Token: 123456789}},
	{"cancel-wait", fsm.Command{Type: fsm.TypeCancelWait, Session: sid(1), Lock: "jobs/nightly"}},
	{"delay-ended", fsm.Command{Type: fsm.TypeDelayEnded, Lock: "jobs/nightly", Now: now0}},
	{"set-member", fsm.Command{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "n1", RaftAddr: "127.0.0.1:7101", HTTPAddr: "127.0.0.1:7001"}}},
}

func BenchmarkEncode(b *testing.B) {
	for _, bc := range benchCommands {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 0, 256)
			b.ReportAllocs()
			for b.Loop() {
				buf = bc.c.Encode(buf[:0])
			}
			b.ReportMetric(float64(len(buf)), "bytes")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, bc := range benchCommands {
		b.Run(bc.name, func(b *testing.B) {
			data := bc.c.Encode(nil)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := fsm.DecodeCommand(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// countingSink is a SnapshotSink that discards what it is given and counts it.
type countingSink struct{ n int64 }

func (s *countingSink) Write(p []byte) (int, error) { s.n += int64(len(p)); return len(p), nil }
func (s *countingSink) Close() error                { return nil }
func (s *countingSink) ID() string                  { return "count" }
func (s *countingSink) Cancel() error               { return nil }

// fileSink writes to a file through a buffer and fsyncs on Close, as raft's file snapshot
// store does.
type fileSink struct {
	f *os.File
	*bufio.Writer
}

func (s *fileSink) Close() error {
	if err := s.Flush(); err != nil {
		return err
	}
	if err := s.f.Sync(); err != nil {
		return err
	}
	return s.f.Close()
}
func (s *fileSink) ID() string    { return "file" }
func (s *fileSink) Cancel() error { return s.f.Close() }

// BenchmarkSnapshot1MLocks takes a snapshot of 1,000,000 held locks and 100,000 sessions:
// the capture under the read lock (which holds up Apply), then writing it, to a sink that
// discards the bytes or to an fsynced file.
func BenchmarkSnapshot1MLocks(b *testing.B) {
	f, _ := bigState(b)
	for _, where := range []string{"discard", "file"} {
		b.Run(where, func(b *testing.B) {
			var captureNs, size int64
			for b.Loop() {
				start := time.Now()
				snap, err := f.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				captureNs += time.Since(start).Nanoseconds()
				var sink raft.SnapshotSink
				counter := &countingSink{}
				sink = counter
				if where == "file" {
					out, err := os.Create(filepath.Join(b.TempDir(), "snap"))
					if err != nil {
						b.Fatal(err)
					}
					sink = &fileSink{out, bufio.NewWriterSize(io.MultiWriter(out, counter), 1<<20)}
				}
				if err := snap.Persist(sink); err != nil {
					b.Fatal(err)
				}
				snap.Release()
				size = counter.n
			}
			b.ReportMetric(float64(size), "snapshot-bytes")
			b.ReportMetric(float64(captureNs)/float64(b.N)/1e6, "capture-ms")
			b.ReportMetric(float64(size)/bigLocks, "bytes/lock-on-disk")
		})
	}
}

// BenchmarkApplyDuringSnapshot1MLocks applies commands while a snapshot of 1,000,000 held
// locks (among 64 sessions) is taken and written, as raft does it: the capture on the applying
// goroutine, the write beside it. Each command gives a held lock a new value, so each changes
// a lock the snapshot saw. stall-ms is the longest time between two applies (the capture
// among them), and ns/apply-writing the mean time of an apply while the snapshot was written.
func BenchmarkApplyDuringSnapshot1MLocks(b *testing.B) {
	_, snap := few.get(b, 64)
	f := fsm.New(nil)
	if err := f.Restore(readCloser(snap)); err != nil {
		b.Fatal(err)
	}
	index, next := uint64(10*bigLocks), 0
	apply := func() {
		index++
		next = (next + 7919) % bigLocks // a prime stride: each lock once per pass
		c := fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(next % 64), Lock: scrambledLockName(next),
			SetValue: true, Value: fmt.Sprint("v", index), Now: now0}
		if r := f.ApplyCommand(index, c); r.Status != fsm.StatusOK || r.Err != nil {
			b.Fatalf("index %d: %+v", index, r)
		}
	}
	var stall, writing time.Duration
	applies := 0
	for b.Loop() {
		last := time.Now()
		s, err := f.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Persist(&countingSink{}) }()
		start := time.Now()
	loop:
		for {
			select {
			case err := <-done:
				if err != nil {
					b.Fatal(err)
				}
				break loop
			default:
			}
			apply()
			applies++
			now := time.Now()
			stall = max(stall, now.Sub(last))
			last = now
		}
		writing += time.Since(start)
		s.Release()
	}
	b.ReportMetric(float64(stall.Microseconds())/1e3, "stall-ms")
	b.ReportMetric(float64(writing.Nanoseconds())/float64(max(applies, 1)), "ns/apply-writing")
}

// BenchmarkRestore1MLocks restores the snapshot of 1,000,000 held locks, held by 100,000
// sessions or by 64, into a new state machine, from a reader that tells its size as raft's
// snapshot store does in cluster.
func BenchmarkRestore1MLocks(b *testing.B) {
	for _, shape := range []struct {
		state    *builtState
		sessions int
	}{{&big, bigSessions}, {&few, 64}} {
		sessions := shape.sessions
		b.Run(fmt.Sprintf("sessions=%d", sessions), func(b *testing.B) {
			_, snap := shape.state.get(b, sessions)
			for b.Loop() {
				f := fsm.New(nil)
				rc, _ := sizedReader(snap, int64(len(snap)))
				if err := f.Restore(rc); err != nil {
					b.Fatal(err)
				}
				if st := f.Stats(); st.Held != bigLocks || st.Sessions != sessions {
					b.Fatalf("restored %+v", st)
				}
			}
			b.ReportMetric(float64(len(snap)), "snapshot-bytes")
		})
	}
}

// BenchmarkDelayedLocks1MLocks lists the delayed locks (none) among 1,000,000 held ones, as a
// new leader does when it arms its lock-delay timers; it holds the read lock throughout.
func BenchmarkDelayedLocks1MLocks(b *testing.B) {
	f, _ := bigState(b)
	for b.Loop() {
		if d := f.DelayedLocks(); len(d) != 0 {
			b.Fatal(d)
		}
	}
}

// BenchmarkLocksPrefix1MLocks lists the 10 locks under a prefix among 1,000,000 (GET
// /v1/locks?prefix=), under the read lock.
func BenchmarkLocksPrefix1MLocks(b *testing.B) {
	f, _ := bigState(b)
	for b.Loop() {
		if l := f.Locks("jobs/012345"); len(l) != 10 {
			b.Fatalf("%d locks", len(l))
		}
	}
}

// BenchmarkSessions100k lists all 100,000 sessions (GET /v1/sessions), under the read lock.
func BenchmarkSessions100k(b *testing.B) {
	f, _ := bigState(b)
	for b.Loop() {
		if s := f.Sessions(); len(s) != bigSessions {
			b.Fatalf("%d sessions", len(s))
		}
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMemory measures the live heap per session (no locks) and per held lock (100,000
// sessions holding 10 locks each, 12-byte names, no values) of a state built by Apply, and the
// whole state's size built by Apply and by Restore.
func BenchmarkMemory(b *testing.B) {
	for b.Loop() {
		base := heapInUse()
		f := fsm.New(nil)
		next := buildBig(b, f, bigSessions, 0)
		withSessions := heapInUse()
		for i := 0; i < bigLocks; i++ {
			f.ApplyCommand(next, fsm.Command{Type: fsm.TypeAcquire, Session: bigSID(i % bigSessions), Lock: bigLockName(i), Now: now0})
			next++
		}
		withLocks := heapInUse()
		// A tenth of the locks get a waiter each: the session after the holder's.
		const waiters = bigLocks / 10
		for i := 0; i < waiters; i++ {
			f.ApplyCommand(next, fsm.Command{Type: fsm.TypeAcquire, Session: bigSID((i + 1) % bigSessions), Lock: bigLockName(i), Queue: true, Now: now0})
			next++
		}
		withWaiters := heapInUse()
		b.ReportMetric(float64(withSessions-base)/bigSessions, "bytes/session")
		b.ReportMetric(float64(withLocks-withSessions)/bigLocks, "bytes/lock")
		b.ReportMetric(float64(withWaiters-withLocks)/waiters, "bytes/waiter")
		withLocks = withWaiters

		b.ReportMetric(float64(withLocks-base)/(1<<20), "state-MB")

		// The same state restored from a snapshot. The snapshot's bytes are live before the
		// restore and garbage after it, so they are added back.
		snap := snapshotBytes(b, f)
		f = nil
		beforeRestore := heapInUse()
		r := fsm.New(nil)
		if err := r.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			b.Fatal(err)
		}
		size := len(snap)
		snap = nil
		restored := heapInUse() + uint64(size) - beforeRestore
		b.ReportMetric(float64(restored)/(1<<20), "restored-state-MB")
		runtime.KeepAlive(r)
	}
}
