package fsm

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Positioned is what a snapshot reader may implement to tell the log position of the
// snapshot it reads, so that Restore keeps AppliedIndex true (a restored state applied
// nothing through ApplyBatch). Restore also looks behind the readers raft wraps around the
// snapshot store's.
type Positioned interface {
	SnapshotPosition() (index, term uint64)
}

// positionOf returns the log position r or a reader it wraps tells.
func positionOf(r io.Reader) (index, term uint64, ok bool) {
	for {
		if p, is := r.(Positioned); is {
			index, term = p.SnapshotPosition()
			return index, term, true
		}
		w, is := r.(raft.ReadCloserWrapper)
		if !is {
			return 0, 0, false
		}
		r = w.WrappedReadCloser()
	}
}

// Capture is the state at one point of the log, for a backup: the snapshot and the index and
// term of the last entry it holds. Writing it may take a while; later entries apply meanwhile.
type Capture struct {
	snap *snapshot
	// Index and Term are those of the last entry the captured state holds (0 before any).
	Index, Term uint64
}

// Capture captures the current state, as Snapshot does, with its log position.
func (f *FSM) Capture() *Capture {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Capture{snap: captureSnapshot(f.st), Index: f.applied.Load(), Term: f.appliedTerm}
}

// WriteTo writes the captured state in the snapshot format (what Restore reads).
func (c *Capture) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	err := c.snap.write(cw)
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// SnapshotSummary describes what a snapshot holds.
type SnapshotSummary struct {
	// Version is the snapshot format version.
	Version int
	// Sessions, Locks (entries: held, awaited or delayed), Held and Waiters count the lock
	// table; Delayed counts the locks under a lock-delay.
	Sessions, Locks, Held, Waiters, Delayed int
	// ACLBootstrapped, ACLTokens and ACLPolicies describe the ACL state (built-in policy not
	// counted).
	ACLBootstrapped        bool
	ACLTokens, ACLPolicies int
	// Members is the published member metadata the snapshot holds.
	Members []Member
	// Features are the features enabled when the snapshot was taken.
	Features []Feature
	// MaxIndex is the highest log index the state records anywhere: a fencing token, a lock's
	// modify index, a session's or an ACL record's create index. Every token the snapshot's
	// cluster issued up to the snapshot is at most this (a grant's token is its own index).
	MaxIndex uint64
}

// InspectSnapshot reads a whole snapshot, checks it as Restore would (format, checksum,
// consistency) and describes it. It needs no running node.
func InspectSnapshot(r io.Reader) (SnapshotSummary, error) {
	st, version, err := readVersioned(r)
	if err != nil {
		return SnapshotSummary{}, err
	}
	return summarize(st, version), nil
}

// readVersioned reads a snapshot into a state and returns its format version too.
func readVersioned(r io.Reader) (*state, byte, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, 0, err
	}
	st, err := readSnapshot(bytes.NewReader(data))
	if err != nil {
		return nil, 0, err
	}
	return st, data[len(snapshotMagic)], nil // readSnapshot checked the length
}

func summarize(st *state, version byte) SnapshotSummary {
	s := SnapshotSummary{
		Version:         int(version),
		Sessions:        len(st.sessions),
		Locks:           len(st.locks),
		Held:            st.held,
		Waiters:         st.waiters,
		ACLBootstrapped: st.acl.bootstrapped,
		ACLTokens:       len(st.acl.tokens),
		ACLPolicies:     len(st.acl.policies),
		Features:        slices.Clone(st.features),
		MaxIndex:        st.freedIndex,
	}
	for _, m := range st.members {
		s.Members = append(s.Members, m)
	}
	sortMembers(s.Members)
	for _, ss := range st.sessions {
		s.MaxIndex = max(s.MaxIndex, ss.createIndex)
	}
	for _, l := range st.locks {
		s.MaxIndex = max(s.MaxIndex, l.modifyIndex)
		for _, g := range l.grants() {
			s.MaxIndex = max(s.MaxIndex, g.token)
		}
		if l.x != nil {
			for _, d := range l.x.delays {
				s.MaxIndex = max(s.MaxIndex, d.index)
			}
		}
		if l.delayed() {
			s.Delayed++
		}
	}
	for _, p := range st.acl.policies {
		s.MaxIndex = max(s.MaxIndex, p.CreateIndex, p.ModifyIndex)
	}
	for _, t := range st.acl.tokens {
		s.MaxIndex = max(s.MaxIndex, t.CreateIndex)
	}
	return s
}

// RestoreRewrite says how RewriteSnapshot turns a backup's state into what a restore installs.
type RestoreRewrite struct {
	// Members replace the backup's member metadata: the running cluster's (the Raft
	// configuration stays the running cluster's too, so the backup's addresses would be wrong).
	Members []Member
	// Features are enabled besides the backup's own: the running cluster's (a feature is
	// never turned off).
	Features []Feature
	// KeepSessions keeps the backup's sessions with their holds and queue entries. Without it
	// (what a restore does), every session ends: a restore cannot tell their clients what it
	// changed, so none of them may go on using them. Every lock that a session of the backup
	// held, and every lock of Live, is then put under a lock-delay instead (see Live), so that
	// no client that still believes a hold sees another granted before its belief lapses, and
	// nobody holds a lock that no client believes it holds.
	KeepSessions bool
	// Live are the holds and lock-delays of the state the restore replaces (FSM.LiveHolds):
	// the ones clients may believe in now.
	Live []LiveHold
	// Now is the leader's clock reading (Unix ns) that the new lock-delays start from; the
	// leader's timers run each again at its full length from the restore, as after any
	// leader change.
	Now int64
	// Index, if set, is the restored state's log index: every lock the state holds, and every
	// absent one, reads as modified there (no later than it), above every index acknowledged
	// before the restore, as the restored state is all new.
	Index uint64
	// ACL, if set, replaces the backup's ACL state (FSM.CaptureACL): a restore that keeps the
	// running cluster's tokens and policies.
	ACL *ACLCapture
}

// ACLCapture is the ACL state at one moment (bootstrapped or not, the policies, the tokens),
// for a restore that keeps it.
type ACLCapture struct {
	acl aclSnapshot
}

// CaptureACL captures the ACL state. Its entries are never changed in place, so the capture
// shares them.
func (f *FSM) CaptureACL() *ACLCapture {
	f.mu.RLock()
	defer f.mu.RUnlock()
	c := &ACLCapture{acl: aclSnapshot{bootstrapped: f.st.acl.bootstrapped}}
	for _, p := range f.st.acl.policies {
		c.acl.policies = append(c.acl.policies, p)
	}
	for _, t := range f.st.acl.tokens {
		c.acl.tokens = append(c.acl.tokens, t)
	}
	return c
}

// state returns the captured ACL state as a state holds it.
func (c *ACLCapture) state() aclState {
	acl := newACLState()
	acl.bootstrapped = c.acl.bootstrapped
	for _, p := range c.acl.policies {
		acl.policies[p.Name] = p
	}
	for _, t := range c.acl.tokens {
		acl.putToken(t)
	}
	return acl
}

// LiveHold is one grant, or one lock-delay, in force: something a client may believe it
// holds (a delay is a grant whose session expired, whose client may be paused believing it).
type LiveHold struct {
	// Lock is the lock's name, Limit its limit (0 for a lock), Shared whether the hold or
	// delay is a shared one.
	Lock   string
	Limit  uint32
	Shared bool
	// Length is how long the client may believe it from now: its session's TTL plus the
	// session's lock-delay, for a grant; the delay's length, for a delay.
	Length time.Duration
	// Until is a delay's end (the leader's clock, Unix ns); 0 for a grant.
	Until int64
}

// LiveHolds returns every grant and lock-delay in force, sorted by lock.
func (f *FSM) LiveHolds() []LiveHold {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []LiveHold
	for name, l := range f.st.locks {
		for i := range l.holds() {
			h := l.holderInfo(i)
			var length time.Duration
			if ss := f.st.sessions[h.Session]; ss != nil {
				length = ss.ttl + ss.lockDelay
			}
			out = append(out, LiveHold{Lock: name, Limit: l.limit(), Shared: h.Shared, Length: length})
		}
		if l.x != nil {
			for _, d := range l.x.delays {
				out = append(out, LiveHold{Lock: name, Limit: l.limit(), Shared: l.x.shared, Length: d.length, Until: d.until})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b LiveHold) int { return strings.Compare(a.Lock, b.Lock) })
	return out
}

// RewriteSnapshot reads a snapshot from r and writes to w the state a restore into a running
// cluster installs, as rw says: the running cluster's members and features, and, unless
// rw.KeepSessions, no session, each lock that was held (in the backup or in rw.Live) under a
// lock-delay instead. It returns the summary of what it wrote.
func RewriteSnapshot(r io.Reader, w io.Writer, rw RestoreRewrite) (SnapshotSummary, error) {
	st, _, err := readVersioned(r)
	if err != nil {
		return SnapshotSummary{}, err
	}
	st.members = make(map[string]Member, len(rw.Members))
	for _, m := range rw.Members {
		if m.ID == "" {
			return SnapshotSummary{}, fmt.Errorf("fsm: rewrite snapshot: %w: member without id", ErrSnapshotCorrupt)
		}
		st.members[m.ID] = m
	}
	sorted := slices.Clone(rw.Features)
	slices.Sort(sorted)
	st.features = st.features.with(slices.Compact(sorted))
	if rw.ACL != nil {
		st.acl = rw.ACL.state()
	}
	if !rw.KeepSessions {
		st = endSessions(st, rw.Live, rw.Now)
	}
	if rw.Index > 0 {
		st.freedIndex = max(st.freedIndex, rw.Index)
		for _, l := range st.locks {
			l.modifyIndex = max(l.modifyIndex, rw.Index)
		}
	}
	if err := captureSnapshot(st).write(w); err != nil {
		return SnapshotSummary{}, err
	}
	return summarize(st, snapshotVersionOf(st.features)), nil
}

// heldBack is what endSessions gathers of one lock: the delays to keep and the holds to delay.
type heldBack struct {
	limit     uint32
	modify    uint64
	kept      []lockDelay
	shared    bool          // the kept delays are shared
	holds     int           // grants (of the backup and live) and live delays to hold back
	exclusive bool          // one of them, or a kept delay, is exclusive
	mismatch  bool          // a live hold names another limit
	length    time.Duration // the longest of them
	until     int64         // the latest end of a live delay
}

// endSessions returns st without sessions (so without grants and queue entries), with every
// lock that was held or delayed, in st or in live, under lock-delays that keep it from being
// granted for the longest time a client may believe it holds it. The new delays are named by
// indexes above every index st records, so that they clash with no delay kept.
func endSessions(st *state, live []LiveHold, now int64) *state {
	base := summarize(st, 0).MaxIndex
	v6 := st.features.has(FeatureSemaphoresRWLocks)
	locks := make(map[string]*heldBack)
	get := func(name string, limit uint32) *heldBack {
		b := locks[name]
		if b == nil {
			b = &heldBack{limit: limit}
			locks[name] = b
		} else if b.limit != limit {
			b.mismatch = true
		}
		return b
	}
	for name, l := range st.locks {
		b := get(name, l.limit())
		b.modify = l.modifyIndex
		if l.x != nil && len(l.x.delays) > 0 {
			b.kept, b.shared = slices.Clone(l.x.delays), l.x.shared
			b.exclusive = b.exclusive || !l.x.shared
		}
		for i := range l.holds() {
			h := l.holderInfo(i)
			b.holds++
			b.exclusive = b.exclusive || !h.Shared
			if ss := st.sessions[h.Session]; ss != nil {
				b.length = max(b.length, ss.ttl+ss.lockDelay)
			}
		}
	}
	for _, h := range live {
		b := get(h.Lock, h.Limit)
		b.holds++
		b.exclusive = b.exclusive || !h.Shared
		b.length = max(b.length, h.Length)
		b.until = max(b.until, h.Until)
	}

	ns := newState()
	ns.members, ns.acl, ns.features, ns.freedIndex = st.members, st.acl, st.features, st.freedIndex
	names := make([]string, 0, len(locks))
	for name := range locks {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		b := locks[name]
		if b.holds == 0 && len(b.kept) == 0 {
			// Only awaited: nothing to hold back, and nobody waits any more.
			ns.freedIndex = max(ns.freedIndex, b.modify)
			continue
		}
		l := ns.newLock(name)
		l.modifyIndex = b.modify
		l.x = &lockExt{limit: b.limit, shared: b.shared, delays: b.kept}
		if b.holds > 0 {
			// Changed by the restore: after every index the backup records.
			l.x = b.delays(v6, base, now)
			l.modifyIndex = max(b.modify, base+1, l.x.delays[len(l.x.delays)-1].index)
		}
		ns.addLock(l)
	}
	return ns
}

// delays returns the lock-delays that hold back b's holds (b.holds > 0) and replace its kept
// ones, each as long as the longest of them. Without FeatureSemaphoresRWLocks a lock has one
// delay, unnamed; with it, the delays are named base+1, base+2, …; a lock's delay is exclusive
// unless every hold and delay was shared, and a semaphore keeps back as many permits as were
// held or delayed (all of them if a live hold named another limit).
func (b *heldBack) delays(v6 bool, base uint64, now int64) *lockExt {
	length, until := b.length, b.until
	for _, d := range b.kept {
		length, until = max(length, d.length), max(until, d.until)
	}
	until = max(until, now+int64(length), 1) // 0 means "not delayed"
	d := lockDelay{until: until, length: length}
	switch {
	case !v6:
		return &lockExt{delays: []lockDelay{d}}
	case b.limit == 0 && b.exclusive:
		d.index = base + 1
		return &lockExt{delays: []lockDelay{d}}
	case b.limit == 0:
		d.index = base + 1
		return &lockExt{shared: true, delays: []lockDelay{d}}
	}
	n := len(b.kept) + b.holds
	if b.mismatch || n > int(b.limit) {
		n = int(b.limit)
	}
	x := &lockExt{limit: b.limit}
	for i := range n {
		d.index = base + 1 + uint64(i)
		x.delays = append(x.delays, d)
	}
	return x
}

// UnknownFeatures returns the features of fs that this state machine cannot apply.
func (f *FSM) UnknownFeatures(fs []Feature) []Feature {
	var out []Feature
	for _, x := range fs {
		if !f.known.has(x) {
			out = append(out, x)
		}
	}
	return out
}

// Restores returns how many snapshots this state machine has installed: a change to it means
// the whole state was replaced, and indexes read before may be ahead of the state now.
func (f *FSM) Restores() uint64 { return f.restores.Load() }
