package fsm

import (
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// session is the stored form of a session. held and waits are derived from the lock table and
// rebuilt on restore, so they are never written to a snapshot.
type session struct {
	id          SessionID
	name        string
	ttl         time.Duration
	lockDelay   time.Duration
	owner       string // accessor id of the token that created it; "" without ACLs
	createIndex uint64
	held        *lock               // first of the locks held, linked through their grants (grants.go)
	waits       map[string]struct{} // locks whose queue holds this session
	slot        uint32              // position in state.sessionSlots
	// fences are the session's last cancelled attempts, oldest first, at most maxFences. A
	// snapshot may be reading them: the slice is replaced, never changed, and only in a copy
	// of the session made by state.ownSession.
	fences []fence
	// attemptFloor and ended are the numbered attempts that ended (FeatureAttemptNumbers):
	// every attempt below the floor, and for each lock every attempt up to ended[lock], which
	// is kept only above the floor. Nothing is forgotten: the floor, which the client raises
	// as its older attempts end, is what keeps ended small. A snapshot may be reading ended:
	// it is changed only in a copy of the session made by state.ownSession, which clones it.
	attemptFloor uint64
	ended        map[string]uint64
	gen          uint64 // as lock.gen
}

// attemptEnded reports whether the numbered attempt seq of the named lock has ended.
func (ss *session) attemptEnded(lock string, seq uint64) bool {
	return seq < ss.attemptFloor || seq <= ss.ended[lock]
}

// maxFences bounds the cancelled attempts a session remembers; the oldest is forgotten first.
// An attempt's requests are stranded for seconds, not for sixteen later cancels.
const maxFences = 16

// fence is a cancelled attempt: the session's acquires of lock that carry attempt are refused.
type fence struct {
	lock, attempt string
}

// fenced says whether the session cancelled attempt for the named lock.
func (ss *session) fenced(lock, attempt string) bool {
	return slices.Contains(ss.fences, fence{lock, attempt})
}

// withFence returns, in a new slice, ss's fences with f, which is not among them, added last
// and the oldest dropped past maxFences.
func (ss *session) withFence(f fence) []fence {
	keep := ss.fences
	if len(keep) >= maxFences {
		keep = keep[len(keep)-maxFences+1:]
	}
	out := make([]fence, 0, len(keep)+1)
	return append(append(out, keep...), f)
}

// heldNames returns the names of the locks ss holds, sorted; empty, not nil, when none.
func (ss *session) heldNames() []string {
	names := []string{}
	for l := range ss.heldLocks {
		names = append(names, l.name)
	}
	sort.Strings(names)
	return names
}

// waiter is one entry of a lock's FIFO queue: a session, the value it asked to store, and
// whether it asked for a shared hold.
type waiter struct {
	session SessionID
	value   string
	shared  bool
}

// lockDelay is a lock-delay in force, started by the expiry of one of the lock's holders. A
// DelayEnded command ends it (so does an acquire in a log entry from before leaders left the
// clock reading out of acquires; see Command.Now).
type lockDelay struct {
	until  int64         // the expiring leader's clock reading plus length, Unix ns; never 0
	length time.Duration // the session's lock-delay; 0 if restored from a snapshot without it
	// index is the log index of the expiry that started it, by which a DelayEnded names it
	// (FeatureSemaphoresRWLocks); 0 for a delay started before that feature was enabled,
	// which is then the lock's only one.
	index uint64
}

// lock is the stored form of a lock. An entry exists while the lock is held, awaited or
// delayed; a free, idle lock is removed. Its grants are one list (see grants.go), which a
// lock with at most one grant keeps in the entry itself; each grant links the lock into its
// holder's list of held locks.
type lock struct {
	name string // the key of the lock table
	// one stores the lock's grant when it has exactly one (inline is then set); see grants.go.
	one    [1]grant
	inline bool
	slot   uint32 // position in state.lockSlots; beside inline, it fills the struct's padding
	// modifyIndex is the index of the last command that changed the lock's visible state.
	modifyIndex uint64
	// x is nil for a plain lock without a lock-delay, which keeps the entry at 128 bytes.
	x       *lockExt
	waiters []waiter
	// gen is the state's generation when this copy was made; a copy older than the state's
	// may be in a snapshot being written, and is replaced rather than changed (state.own).
	gen uint64
}

// state is the whole replicated state. It is only touched under the FSM's lock.
type state struct {
	sessions map[SessionID]*session
	locks    map[string]*lock
	members  map[string]Member
	acl      aclState
	// owned counts the sessions of each owner (derived: rebuilt on restore).
	owned map[string]int
	// sessionSlots and lockSlots hold the entries of sessions and locks again, in tables that a
	// snapshot captures by copying a pointer per 1,024 entries (see slots).
	sessionSlots slots[session]
	lockSlots    slots[lock]
	// freedIndex is the highest index at which a lock entry was removed: the modify index that
	// absent locks report.
	freedIndex uint64
	// held and waiters count held locks and queue entries, for metrics.
	held, waiters int
	// features are the features enabled in the cluster (EnableFeatures).
	features featureSet
	// gen counts snapshot captures. A capture shares the lock entries and the slot chunks with
	// the live state instead of copying them, so everything it saw must stay unchanged: see
	// own and slots.set.
	gen uint64
}

func newState() *state {
	return &state{
		sessions: make(map[SessionID]*session),
		locks:    make(map[string]*lock),
		members:  make(map[string]Member),
		acl:      newACLState(),
		owned:    make(map[string]int),
	}
}

// newLock returns a new entry for the named lock, not yet in the lock table.
func (s *state) newLock(name string) *lock {
	return &lock{name: name, gen: s.gen}
}

// addLock puts l in the lock table.
func (s *state) addLock(l *lock) {
	s.locks[l.name] = l
	l.slot = s.lockSlots.add(s.gen, l)
}

// removeLock takes l out of the lock table.
func (s *state) removeLock(l *lock) {
	delete(s.locks, l.name)
	s.lockSlots.remove(s.gen, l.slot)
}

// addSession puts ss in the session table.
func (s *state) addSession(ss *session) {
	s.sessions[ss.id] = ss
	ss.slot = s.sessionSlots.add(s.gen, ss)
	if ss.owner != "" {
		s.owned[ss.owner]++
	}
}

// ownSession returns ss if no snapshot can have captured it, and otherwise a copy that takes
// its place in the session table, so that the caller may change its fences.
func (s *state) ownSession(ss *session) *session {
	if ss.gen == s.gen {
		return ss
	}
	c := new(session)
	*c = *ss
	c.gen = s.gen
	c.ended = maps.Clone(ss.ended)
	s.sessions[c.id] = c
	s.sessionSlots.set(s.gen, c.slot, c)
	return c
}

// removeSession takes ss out of the session table.
func (s *state) removeSession(ss *session) {
	delete(s.sessions, ss.id)
	s.sessionSlots.remove(s.gen, ss.slot)
	if ss.owner != "" {
		if s.owned[ss.owner]--; s.owned[ss.owner] == 0 {
			delete(s.owned, ss.owner)
		}
	}
}

// own returns l if no snapshot can have captured it, and otherwise a copy that takes its place
// in the lock table and in its holders' lists, so that the caller may change it. Only the
// links of a captured entry's grants may still change, and Persist never reads them.
func (s *state) own(l *lock) *lock {
	if l.gen == s.gen {
		return l
	}
	c := new(lock)
	*c = *l
	c.gen = s.gen
	c.waiters = slices.Clone(l.waiters)
	c.x = l.x.clone()
	s.locks[c.name] = c
	s.lockSlots.set(s.gen, c.slot, c)
	gs := c.grants()
	for i := range gs {
		s.relink(c, &gs[i])
	}
	old := l.grants()
	for i := range old {
		old[i].prev, old[i].next = nil, nil
	}
	return c
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
		info.Holder, info.Token, info.Value = g.session, g.token, g.value
	}
	if x := l.x; x != nil {
		info.Limit, info.Shared, info.DelayUntil = x.limit, x.shared, x.earliestUntil()
	}
	return info
}

func (s *state) sessionInfo(ss *session) SessionInfo {
	return SessionInfo{
		ID:          ss.id,
		Name:        ss.name,
		TTL:         ss.ttl,
		LockDelay:   ss.lockDelay,
		CreateIndex: ss.createIndex,
		Locks:       ss.heldNames(),
		Owner:       ss.owner,
	}
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (s *state) sortedLockNames(prefix string) []string {
	names := make([]string, 0, len(s.locks))
	for name := range s.locks {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func (s *state) sortedSessionIDs() []SessionID {
	ids := make([]SessionID, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return string(ids[i][:]) < string(ids[j][:]) })
	return ids
}
