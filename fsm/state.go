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
	held        *lock               // first of the locks held, linked through their grants (lock.go)
	waits       map[string]struct{} // locks whose queue holds this session
	slot        uint32              // position in state.sessionSlots
	// fences, attemptFloor and ended keep the attempts that ended (attempts.go).
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

// heldNames returns the names of the locks ss holds, sorted; empty, not nil, when none.
func (ss *session) heldNames() []string {
	names := []string{}
	for l := range ss.heldLocks {
		names = append(names, l.name)
	}
	sort.Strings(names)
	return names
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

func (s *state) sessionInfo(ss *session) SessionInfo {
	return s.sessionInfoWaiting(ss, s.waitsOf(ss))
}

// sessionInfoWaiting is sessionInfo with the session's waits given.
func (s *state) sessionInfoWaiting(ss *session, waiting []WaitInfo) SessionInfo {
	return SessionInfo{
		ID:          ss.id,
		Name:        ss.name,
		TTL:         ss.ttl,
		LockDelay:   ss.lockDelay,
		CreateIndex: ss.createIndex,
		Locks:       ss.heldNames(),
		Owner:       ss.owner,
		Waiting:     waiting,
	}
}

// waitsOf returns the locks ss waits for, sorted, each with the time it joined the queue; nil
// when none.
func (s *state) waitsOf(ss *session) []WaitInfo {
	if len(ss.waits) == 0 {
		return nil
	}
	out := make([]WaitInfo, 0, len(ss.waits))
	for _, name := range sortedKeys(ss.waits) {
		w := WaitInfo{Lock: name}
		if l := s.locks[name]; l != nil {
			if i := indexOfWaiter(l.waiters, ss.id); i >= 0 {
				w.Since = l.waiters[i].since
			}
		}
		out = append(out, w)
	}
	return out
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
