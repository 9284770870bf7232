package fsm

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// FSM is the replicated lock state machine. It implements raft.FSM and raft.BatchingFSM; its
// read methods are safe to call concurrently with Apply.
type FSM struct {
	observer Observer
	// known are the features this state machine can apply (WithFeatures); by default all.
	known featureSet

	mu     sync.RWMutex
	st     *state
	events []Event // reused between applies; only touched by the applying goroutine
	// applied is the index of the last entry ApplyBatch was given, or of the snapshot Restore
	// installed (when its reader tells it, see Positioned). It is local bookkeeping, never
	// part of the replicated state or of snapshots. appliedTerm is that entry's term; it is
	// only touched under mu.
	applied     atomic.Uint64
	appliedTerm uint64
	// restores counts the snapshots Restore installed (local bookkeeping, like applied).
	restores atomic.Uint64
	// halted is set, for good, at the first entry this state machine cannot apply (see
	// ApplyBatch); only touched under mu.
	halted error
}

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an empty state machine that reports applied effects to obs (which may be nil).
func New(obs Observer, opts ...Option) *FSM {
	f := &FSM{observer: obs, st: newState(), known: AllFeatures()}
	for _, o := range opts {
		o(f)
	}
	return f
}

// Apply applies one log entry and returns its Result.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies a batch of log entries in order and returns one Result per entry (nil for
// entries that are not commands, such as configuration changes). At an entry in a format only
// a newer version writes (ErrNewerFormat), which this node must not skip, it halts: that
// entry and every later one, in this batch and after, is answered with Halted's error and
// changes nothing, the applied index stays before it, and Snapshot refuses, so that nothing
// of a state that misses the entry is kept. Its embedder stops the node (see Halted).
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	out := make([]interface{}, len(logs))
	f.mu.Lock()
	a := applier{st: f.st, events: f.events[:0]}
	last := -1 // the last entry applied
	for i, l := range logs {
		if f.halted != nil {
			out[i] = Result{Index: l.Index, Err: f.halted}
			continue
		}
		last = i
		if l.Type != raft.LogCommand {
			continue
		}
		a.index, a.term, a.at = l.Index, l.Term, 0
		if !l.AppendedAt.IsZero() && f.st.features.has(FeatureGrantTimes) && f.st.features.has(FeatureSemaphoresRWLocks) {
			a.at = l.AppendedAt.UnixNano()
		}
		c, err := DecodeCommand(l.Data)
		if err == nil {
			if u := f.unknownFeature(&c); u != "" {
				err = fmt.Errorf("%w: feature %q", ErrNewerFormat, u)
			}
		}
		if errors.Is(err, ErrNewerFormat) {
			// A newer version wrote it, and the nodes of that version apply it: skipping it
			// here would let this node's state drift from theirs. Stop instead, until upgraded.
			f.halted = newerFormat(l.Index, err)
			out[i] = Result{Index: l.Index, Err: f.halted}
			last = i - 1
			continue
		}
		if err != nil {
			// Malformed in the format this node knows, so every node refuses it alike.
			out[i] = Result{Index: l.Index, Err: err}
			continue
		}
		from := len(a.events)
		r := a.apply(&c)
		a.describeChanges(from)
		r.Index = l.Index
		out[i] = r
	}
	f.events = a.events
	if last >= 0 {
		f.applied.Store(logs[last].Index)
		f.appliedTerm = logs[last].Term
	}
	f.mu.Unlock()
	if f.observer != nil && len(a.events) > 0 {
		f.observer.Observe(a.events)
	}
	return out
}

// Halted returns nil, or, once ApplyBatch has met an entry this state machine cannot apply
// (it needs a newer version), an error that wraps ErrNewerFormat and names the entry. The
// state machine applies nothing more after it: stop the node and upgrade it.
func (f *FSM) Halted() error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.halted
}

// ApplyCommand encodes and applies c at index, without raft; for tests and tools that replay
// commands directly.
func (f *FSM) ApplyCommand(index uint64, c Command) Result {
	r := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: c.Encode(nil)})
	return r.(Result)
}

// ApplyCommandAt is ApplyCommand for a log entry the leader appended at the given time
// (raft.Log.AppendedAt), which grants and queue entries keep (FeatureGrantTimes).
func (f *FSM) ApplyCommandAt(index uint64, at time.Time, c Command) Result {
	r := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: c.Encode(nil), AppendedAt: at})
	return r.(Result)
}

// AppliedIndex returns the index of the last entry this state machine applied (commands and
// configuration entries: raft keeps its no-op and barrier entries to itself), or 0 before the
// first. Unlike raft's own applied index, which raft advances when it hands entries over, it
// never lags behind the state a read sees.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// Lock returns the state of the named lock; a lock without an entry reads as free.
func (f *FSM) Lock(name string) LockInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.lockInfo(name)
}

// Queued reports whether the session waits in the named lock's queue.
func (f *FSM) Queued(lock string, session SessionID) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.st.locks[lock]
	return l != nil && indexOfWaiter(l.waiters, session) >= 0
}

// Locks returns, sorted by name, every held, awaited or delayed lock whose name has prefix.
func (f *FSM) Locks(prefix string) []LockInfo {
	return listLocks(f, prefix, (*state).lockInfo)
}

// listLocks returns, sorted by name, what view reads of every held, awaited or delayed lock
// whose name has prefix, all read at one moment.
func listLocks[T any](f *FSM, prefix string, view func(*state, string) T) []T {
	f.mu.RLock()
	defer f.mu.RUnlock()
	names := f.st.sortedLockNames(prefix)
	out := make([]T, len(names))
	for i, n := range names {
		out[i] = view(f.st, n)
	}
	return out
}

// Session returns the session with id, and whether it exists.
func (f *FSM) Session(id SessionID) (SessionInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ss := f.st.sessions[id]
	if ss == nil {
		return SessionInfo{}, false
	}
	return f.st.sessionInfo(ss), true
}

// Sessions returns every session, sorted by id.
func (f *FSM) Sessions() []SessionInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ids := f.st.sortedSessionIDs()
	out := make([]SessionInfo, len(ids))
	// Each queue is read once for every session's waits: looking each session up in its
	// queues would cost the length of a long queue for each of its waiters.
	waiting := map[SessionID][]WaitInfo{}
	for _, name := range f.st.sortedLockNames("") {
		for _, w := range f.st.locks[name].waiters {
			waiting[w.session] = append(waiting[w.session], WaitInfo{Lock: name, Since: w.since})
		}
	}
	for i, id := range ids {
		ss := f.st.sessions[id]
		out[i] = f.st.sessionInfoWaiting(ss, waiting[id])
	}
	return out
}

// SessionTTLs calls fn with the id and TTL of every session, in no particular order, under the
// read lock; fn must not call back into the FSM.
func (f *FSM) SessionTTLs(fn func(id SessionID, ttl time.Duration)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for id, ss := range f.st.sessions {
		fn(id, ss.ttl)
	}
}

// DelayedLocks returns the lock-delays that have not been ended, sorted by lock name and, for
// one lock, in the order they started.
func (f *FSM) DelayedLocks() []DelayedLock {
	f.mu.RLock()
	defer f.mu.RUnlock()
	// Filter, then sort the few delayed locks: sorting every name held up Apply for most of a
	// second with 1,000,000 locks, on every leadership gain.
	var out []DelayedLock
	for name, l := range f.st.locks {
		if l.x == nil {
			continue
		}
		for _, d := range l.x.delays {
			out = append(out, DelayedLock{Name: name, Until: d.until, Length: d.length, Index: d.index})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Members returns the published member metadata, sorted by id.
func (f *FSM) Members() []Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Member, 0, len(f.st.members))
	for _, m := range f.st.members {
		out = append(out, m)
	}
	sortMembers(out)
	return out
}

// Member returns the published metadata of the member id, and whether there is any.
func (f *FSM) Member(id string) (Member, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.st.members[id]
	return m, ok
}

// Stats are counts for metrics.
type Stats struct {
	Sessions, Locks, Held, Waiters int
}

// Stats returns the current counts of sessions, lock entries, held locks and waiters.
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Stats{Sessions: len(f.st.sessions), Locks: len(f.st.locks), Held: f.st.held, Waiters: f.st.waiters}
}

// Snapshot captures the current state for raft; the capture is cheap and Persist may run
// concurrently with later applies.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock() // the capture starts a new generation of the state
	defer f.mu.Unlock()
	if f.halted != nil {
		return nil, f.halted
	}
	return captureSnapshot(f.st), nil
}

// Restore replaces the whole state with the snapshot read from rc. On error the current state
// is kept unchanged.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	st, err := readSnapshot(rc)
	if err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	if err := f.knowsAll(st.features); err != nil {
		return fmt.Errorf("fsm: restore: %w", err)
	}
	at := st.lastChange()
	f.mu.Lock()
	f.st = st
	if index, term, ok := positionOf(rc); ok {
		f.applied.Store(index)
		f.appliedTerm = term
		at = index // a restored backup's state may hold only changes far below its index
	}
	f.restores.Add(1)
	f.mu.Unlock()
	if f.observer != nil {
		f.observer.Observe([]Event{{Kind: EventRestored, Index: at}})
	}
	return nil
}
