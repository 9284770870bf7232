package fsm

import "sort"

// Reads of the lock table, as the API and the leader see it: a lock's state (LockInfo), its
// grants (LockView, Holders, HoldOf), its delays and which queues are ready to be served. Each
// takes the read lock and reads at one moment.

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

// HolderInfo is one grant of a lock, as readers see it.
type HolderInfo struct {
	Session SessionID
	Token   uint64
	Value   string
	// Shared says that it is a shared (read) hold of a lock.
	Shared bool
	// Since is the time of the log entry that granted it (Unix ns; FeatureGrantTimes), 0 if
	// unknown.
	Since int64
}

// WaiterInfo is one entry of a lock's queue, as readers see it.
type WaiterInfo struct {
	Session SessionID
	// Name is the waiting session's name.
	Name string
	// Shared says that it waits for a shared (read) hold.
	Shared bool
	// Since is the time of the log entry that queued it (Unix ns; FeatureGrantTimes), 0 if
	// unknown.
	Since int64
}

// holderInfo returns the grant at position i of l's grants.
func (l *lock) holderInfo(i int) HolderInfo {
	g := &l.grants()[i]
	return HolderInfo{Session: g.session, Token: g.token, Value: g.value, Shared: l.shared(), Since: g.since}
}

// LockView is a lock with every grant it has, read at one moment.
type LockView struct {
	LockInfo
	// Holders are the lock's grants, oldest first; LockInfo's Holder, Token and Value are the
	// last one's.
	Holders []HolderInfo
	// Queue is the lock's queue, in order: the first is granted first.
	Queue []WaiterInfo
}

// LockView returns the named lock with its grants; a lock without an entry reads as free.
func (f *FSM) LockView(name string) LockView {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.lockViewWithQueue(name)
}

// LockViews returns, sorted by name, every held, awaited or delayed lock whose name has
// prefix, with its grants, all read at one moment.
func (f *FSM) LockViews(prefix string) []LockView {
	return listLocks(f, prefix, (*state).lockViewWithQueue)
}

// lockViewWithQueue is lockView with the lock's queue, for readers: a change's view leaves it
// out, since a command that queues one more waiter would otherwise copy the whole queue.
func (s *state) lockViewWithQueue(name string) LockView {
	v := s.lockView(name)
	if l := s.locks[name]; l != nil && len(l.waiters) > 0 {
		v.Queue = make([]WaiterInfo, len(l.waiters))
		for i, w := range l.waiters {
			v.Queue[i] = WaiterInfo{Session: w.session, Shared: w.shared, Since: w.since}
			if ss := s.sessions[w.session]; ss != nil {
				v.Queue[i].Name = ss.name
			}
		}
	}
	return v
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

func (s *state) lockInfo(name string) LockInfo {
	l := s.locks[name]
	if l == nil {
		return LockInfo{Name: name, ModifyIndex: s.freedIndex}
	}
	info := LockInfo{
		Name:        name,
		Held:        l.held(),
		Waiters:     len(l.waiters),
		ModifyIndex: l.modifyIndex,
	}
	if info.Held {
		g := l.newest()
		info.Holder, info.Token, info.Value, info.Since = g.session, g.token, g.value, g.since
	}
	if x := l.x; x != nil {
		info.Limit, info.Shared, info.DelayUntil = x.limit, x.shared, x.earliestUntil()
	}
	return info
}
