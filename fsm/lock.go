package fsm

import "slices"

// How a lock entry is stored: its grants, its queue and its extension (a semaphore's limit,
// the mode of its holds, its lock-delays), and the list of the locks each session holds.
//
// A lock's grants are one list, oldest first, so tokens grow along it: a plain mutex's list
// has at most one grant, a semaphore's at most its limit, a read/write lock's one exclusive
// grant or any number of shared ones. No rule needs to know where a grant is stored: they all
// read the list through lock.grants and change it through addGrant and removeGrant.
//
// A lock with at most one grant keeps it in the entry itself (lock.one), so that a plain mutex
// costs no allocation beyond its 136-byte entry (128 before grants kept their time); a lock
// with two or more keeps them all in its extension (lockExt.grants). The two never both hold
// grants.
//
// A session's held locks are one doubly linked list, whose links are in the session's grant of
// each lock (grant.prev, grant.next): granting or releasing a lock touches no per-session map,
// and a session's grant of a lock is found by the session's id among the lock's grants. The
// links point to lock entries, which state.own relinks when it replaces an entry; a snapshot
// never reads them.
//
// A snapshot may be reading an entry: Apply changes one only through state.own, which copies
// an entry (and its extension) that a snapshot captured; only the links of a captured entry's
// grants may still change.

// lock is the stored form of a lock. An entry exists while the lock is held, awaited or
// delayed; a free, idle lock is removed. Its grants are one list (see the top of this file), which a
// lock with at most one grant keeps in the entry itself; each grant links the lock into its
// holder's list of held locks.
type lock struct {
	name string // the key of the lock table
	// one stores the lock's grant when it has exactly one (inline is then set); see the top of this file.
	one    [1]grant
	inline bool
	slot   uint32 // position in state.lockSlots; beside inline, it fills the struct's padding
	// modifyIndex is the index of the last command that changed the lock's visible state.
	modifyIndex uint64
	// x is nil for a plain lock without a lock-delay, which keeps the entry at 136 bytes.
	x       *lockExt
	waiters []waiter
	// gen is the state's generation when this copy was made; a copy older than the state's
	// may be in a snapshot being written, and is replaced rather than changed (state.own).
	gen uint64
}

// grant is one session's hold of a lock: a plain lock's, a semaphore's permit or a shared
// (read) hold.
type grant struct {
	session SessionID
	token   uint64 // the index of the command that granted it
	value   string
	// since is the time of the log entry that granted it (FeatureGrantTimes), Unix ns; 0
	// when the grant is older than the feature or its entry had no time.
	since int64
	// prev and next are the locks before and after this one in its holder's list of held
	// locks (session.held).
	prev, next *lock
}

// waiter is one entry of a lock's FIFO queue: a session, the value it asked to store, and
// whether it asked for a shared hold.
type waiter struct {
	session SessionID
	value   string
	shared  bool
	since   int64 // as grant.since, for the entry that queued it
}

// lockExt is what a lock entry keeps beyond a plain lock's one exclusive grant: a semaphore's
// limit, the mode of its holds, its grants when it has two or more (see the top of this file) and the
// lock-delays in force. A plain lock without a delay has none. It belongs to one lock entry,
// and state.own clones it with the entry, so that a snapshot's copy stays unchanged.
type lockExt struct {
	// limit is a semaphore's limit (2 to MaxLimit): that many sessions may hold it at once. 0
	// for a lock, which one session holds exclusively or several hold shared.
	limit uint32
	// shared says that the holds and delays are shared (a lock's read holds, and the delays
	// their expiries started). Holds and delays of a lock are all shared or are one exclusive
	// hold or delay, since an exclusive grant needs the lock free of both; meaningless when
	// there are none.
	shared bool
	// grants are the lock's grants, oldest first, when it has two or more; else empty.
	grants []grant
	// delays are the lock-delays in force, in the order they started.
	delays []lockDelay
}

// grants returns l's grants, oldest first; nil when it has none. The slice is l's own: a
// change to an element (a value, a link) is a change to l, which must then be owned.
func (l *lock) grants() []grant {
	if l.x != nil && len(l.x.grants) > 0 {
		return l.x.grants
	}
	if l.inline {
		return l.one[:]
	}
	return nil
}

// held reports whether l has a grant.
func (l *lock) held() bool { return l.inline || l.x != nil && len(l.x.grants) > 0 }

// holds returns the number of grants l has.
func (l *lock) holds() int { return len(l.grants()) }

// holdOf returns the position of the session's grant among l's grants, or -1 if it holds none.
func (l *lock) holdOf(id SessionID) int {
	gs := l.grants()
	for i := range gs {
		if gs[i].session == id {
			return i
		}
	}
	return -1
}

// grantOf returns the session's grant of l, which it must hold.
func (l *lock) grantOf(id SessionID) *grant {
	return &l.grants()[l.holdOf(id)]
}

// newest returns l's newest grant, which it must have.
func (l *lock) newest() *grant {
	gs := l.grants()
	return &gs[len(gs)-1]
}

// addGrant appends g, newer than every grant l has, to l's grants and returns where it is
// stored; l must be owned.
func (l *lock) addGrant(g grant) *grant {
	switch gs := l.grants(); len(gs) {
	case 0:
		l.one[0], l.inline = g, true
	case 1:
		x := l.ext()
		x.grants = append(x.grants[:0], gs[0], g)
		l.one[0], l.inline = grant{}, false
	default:
		l.x.grants = append(l.x.grants, g)
	}
	return l.newest()
}

// removeGrant removes the grant at position i of l's grants; l must be owned.
func (l *lock) removeGrant(i int) {
	switch gs := l.grants(); len(gs) {
	case 1:
		l.one[0], l.inline = grant{}, false
	case 2:
		keep := gs[1-i]
		clear(gs)
		l.x.grants = l.x.grants[:0]
		l.one[0], l.inline = keep, true
	default:
		l.x.grants = slices.Delete(l.x.grants, i, i+1)
	}
}

// link adds l, which ss now holds with g, to ss's held locks.
func (ss *session) link(l *lock, g *grant) {
	g.prev, g.next = nil, ss.held
	if ss.held != nil {
		ss.held.grantOf(ss.id).prev = l
	}
	ss.held = l
}

// unlink removes l, whose grant g of ss is ending, from ss's held locks.
func (ss *session) unlink(g *grant) {
	if g.prev != nil {
		g.prev.grantOf(ss.id).next = g.next
	} else {
		ss.held = g.next
	}
	if g.next != nil {
		g.next.grantOf(ss.id).prev = g.prev
	}
	g.prev, g.next = nil, nil
}

// relink points the neighbours of c's grant g in its holder's list of held locks to c, the
// entry that replaces the one they pointed to (see state.own).
func (s *state) relink(c *lock, g *grant) {
	if g.prev != nil {
		g.prev.grantOf(g.session).next = c
	} else {
		s.sessions[g.session].held = c
	}
	if g.next != nil {
		g.next.grantOf(g.session).prev = c
	}
}

// heldLocks calls yield for each lock ss holds, in no particular order.
func (ss *session) heldLocks(yield func(*lock) bool) {
	for l := ss.held; l != nil; {
		next := l.grantOf(ss.id).next
		if !yield(l) {
			return
		}
		l = next
	}
}

// clone returns a copy of x that shares nothing that changes, or nil for nil.
func (x *lockExt) clone() *lockExt {
	if x == nil {
		return nil
	}
	c := *x
	c.grants = slices.Clone(x.grants)
	c.delays = slices.Clone(x.delays)
	return &c
}

// empty reports whether x says nothing a plain lock without a delay does not.
func (x *lockExt) empty() bool {
	return x.limit == 0 && !x.shared && len(x.grants) == 0 && len(x.delays) == 0
}

// limit returns the lock's limit: 0 for a lock, 2 to MaxLimit for a semaphore.
func (l *lock) limit() uint32 {
	if l.x == nil {
		return 0
	}
	return l.x.limit
}

// shared reports whether the lock's holds and delays are shared ones.
func (l *lock) shared() bool { return l.x != nil && l.x.shared }

// ext returns l's extension, made if it has none; l must be owned (state.own).
func (l *lock) ext() *lockExt {
	if l.x == nil {
		l.x = &lockExt{}
	}
	return l.x
}

// tidy keeps the extension canonical after a change: without holds or delays the mode is
// exclusive, and an extension that says nothing is dropped, so that a lock whose delay ended
// is a plain entry again.
func (l *lock) tidy() {
	x := l.x
	if x == nil {
		return
	}
	if !l.held() && len(x.delays) == 0 {
		x.shared = false
	}
	if x.empty() {
		l.x = nil
	}
}
