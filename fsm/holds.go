package fsm

import (
	"slices"
	"sort"
)

// MaxLimit is the highest limit a semaphore may have.
const MaxLimit = 1000

// lockExt is what a lock entry keeps beyond a plain lock's one exclusive grant: a semaphore's
// limit, the mode of its holds, its grants when it has two or more (see grants.go) and the
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

// earliestUntil returns the earliest end of the delays in force, or 0 for none (or nil x).
func (x *lockExt) earliestUntil() int64 {
	var until int64
	if x == nil {
		return 0
	}
	for _, d := range x.delays {
		if until == 0 || d.until < until {
			until = d.until
		}
	}
	return until
}

// anyDue reports whether a delay is over by the clock reading now.
func (x *lockExt) anyDue(now int64) bool {
	for _, d := range x.delays {
		if now >= d.until {
			return true
		}
	}
	return false
}

// endDue ends every delay that is over by the clock reading now; x must be owned.
func (x *lockExt) endDue(now int64) {
	x.delays = slices.DeleteFunc(x.delays, func(d lockDelay) bool { return now >= d.until })
	if len(x.delays) == 0 {
		x.delays = nil
	}
}

// delayIndex returns the position of the delay started at index, or -1.
func (x *lockExt) delayIndex(index uint64) int {
	for i, d := range x.delays {
		if d.index == index {
			return i
		}
	}
	return -1
}

// limit returns the lock's limit: 0 for a lock, 2 to MaxLimit for a semaphore.
func (l *lock) limit() uint32 {
	if l.x == nil {
		return 0
	}
	return l.x.limit
}

// delayed reports whether a lock-delay is in force.
func (l *lock) delayed() bool { return l.x != nil && len(l.x.delays) > 0 }

// shared reports whether the lock's holds and delays are shared ones.
func (l *lock) shared() bool { return l.x != nil && l.x.shared }

// fits reports whether a grant in the given mode can be made beside the lock's holds and
// delays: for a semaphore, while holds and delays leave a permit; for a lock, an exclusive grant
// when it has neither, a shared one when all it has is shared.
func (l *lock) fits(shared bool) bool {
	x := l.x
	if x == nil {
		return !l.held()
	}
	n := len(x.delays) + l.holds()
	if x.limit > 0 {
		return n < int(x.limit)
	}
	return n == 0 || shared && x.shared
}

// grantedAt reports whether the command at index granted l: its newest grant has that token.
func (l *lock) grantedAt(index uint64) bool {
	return l.held() && l.newest().token == index
}

// ready returns how many waiters at the head of l's queue could be granted now, one after the
// other, if each had its own command (see applier.grantNext).
func (l *lock) ready() int {
	if len(l.waiters) == 0 || l.x == nil {
		// A plain lock's head never fits after a command: freeing it grants the head.
		return 0
	}
	x := l.x
	if x.limit > 0 {
		return max(0, min(len(l.waiters), int(x.limit)-len(x.delays)-l.holds()))
	}
	if !l.fits(l.waiters[0].shared) {
		return 0
	}
	n := 0
	for n < len(l.waiters) && l.waiters[n].shared {
		n++
	}
	return max(n, 1)
}

// ReadyQueues returns, sorted, the locks whose first waiter could be granted now: after a
// command that granted such a lock already (see applier.grantNext), until ServeQueue commands
// have granted every waiter that fits. A new leader serves them.
func (f *FSM) ReadyQueues() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for name, l := range f.st.locks {
		if l.ready() > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// Ready returns how many waiters of the named lock could be granted now, one ServeQueue each.
func (f *FSM) Ready(name string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if l := f.st.locks[name]; l != nil {
		return l.ready()
	}
	return 0
}

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

// grant gives ss a grant of l, in the given mode, with this command's index as token; l must
// be owned and the grant fit. The first grant of a lock sets the mode of its holds.
func (a *applier) grant(name string, l *lock, ss *session, value string, shared bool) {
	if !l.held() {
		a.st.held++
		if shared {
			l.ext().shared = true
		} else if l.x != nil {
			l.x.shared = false
		}
	}
	ss.link(l, l.addGrant(grant{session: ss.id, token: a.index, value: value}))
	a.emit(Event{Kind: EventGranted, Lock: name, Session: ss.id, Token: a.index})
}

// ungrant ends ss's grant at position i of l's grants; l must be owned.
func (a *applier) ungrant(ss *session, name string, l *lock, i int) {
	g := &l.grants()[i]
	a.emit(Event{Kind: EventReleased, Lock: name, Session: ss.id, Token: g.token})
	ss.unlink(g)
	l.removeGrant(i)
	if !l.held() {
		a.st.held--
	}
}

// HolderInfo is one grant of a lock, as readers see it.
type HolderInfo struct {
	Session SessionID
	Token   uint64
	Value   string
	// Shared says that it is a shared (read) hold of a lock.
	Shared bool
}

// holderInfo returns the grant at position i of l's grants.
func (l *lock) holderInfo(i int) HolderInfo {
	g := &l.grants()[i]
	return HolderInfo{Session: g.session, Token: g.token, Value: g.value, Shared: l.shared()}
}

// LockView is a lock with every grant it has, read at one moment.
type LockView struct {
	LockInfo
	// Holders are the lock's grants, oldest first; LockInfo's Holder, Token and Value are the
	// last one's.
	Holders []HolderInfo
}

// LockView returns the named lock with its grants; a lock without an entry reads as free.
func (f *FSM) LockView(name string) LockView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.lockView(name)
}

// LockViews returns, sorted by name, every held, awaited or delayed lock whose name has
// prefix, with its grants, all read at one moment.
func (f *FSM) LockViews(prefix string) []LockView {
	return listLocks(f, prefix, (*state).lockView)
}

func (s *state) lockView(name string) LockView {
	v := LockView{LockInfo: s.lockInfo(name)}
	if l := s.locks[name]; l != nil && l.held() {
		v.Holders = make([]HolderInfo, l.holds())
		for i := range v.Holders {
			v.Holders[i] = l.holderInfo(i)
		}
	}
	return v
}

// Holders returns every grant of the named lock, oldest first; nil when it has none.
func (f *FSM) Holders(name string) []HolderInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.st.locks[name]
	if l == nil || !l.held() {
		return nil
	}
	out := make([]HolderInfo, l.holds())
	for i := range out {
		out[i] = l.holderInfo(i)
	}
	return out
}

// HoldOf returns the session's grant of the named lock, and whether it has one.
func (f *FSM) HoldOf(name string, session SessionID) (HolderInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.st.locks[name]
	if l == nil {
		return HolderInfo{}, false
	}
	i := l.holdOf(session)
	if i < 0 {
		return HolderInfo{}, false
	}
	return l.holderInfo(i), true
}

// Delay returns the end of the named lock's delay that index names (see DelayedLock.Index),
// and whether it is still in force.
func (f *FSM) Delay(name string, index uint64) (until int64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.st.locks[name]
	if l == nil || l.x == nil {
		return 0, false
	}
	if i := l.x.delayIndex(index); i >= 0 {
		return l.x.delays[i].until, true
	}
	return 0, false
}

// IsHolderToken reports whether token is the token of a grant the named lock has now.
func (f *FSM) IsHolderToken(name string, token uint64) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.st.locks[name]
	if l == nil {
		return false
	}
	for _, g := range l.grants() {
		if g.token == token {
			return true
		}
	}
	return false
}
