package fsm_test

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// refModel is a deliberately simple reference implementation of the lock rules (issue 2,
// section 1, issue 29 for semaphores and shared holds, and docs/api.md), written from the
// rules and not from the fsm code: it keeps every lock it has ever seen, keeps every grant
// and every delay with its own mode, recomputes the modify index by comparing what a reader
// sees before and after each command, and scans everything instead of keeping indexes.
type refModel struct {
	sessions map[fsm.SessionID]*refSession
	locks    map[string]*refLock
	members  map[string]fsm.Member
	freed    uint64 // index of the last command that made a lock entry disappear

	bootstrapped bool
	policies     map[string]fsm.Policy
	tokens       map[string]fsm.ACLToken // by accessor id
	features     map[fsm.Feature]bool

	term uint64 // of the log entry being applied

	index   uint64      // index of the command being applied
	grants  []fsm.Event // grants made by that command, in order
	delays  []fsm.Event // delays started by that command
	expired []fsm.Event // sessions ended by that command
}

type refSession struct {
	name         string
	ttl, delay   time.Duration
	createdIndex uint64
	cancelled    []refFence // the last 16 cancelled attempts, oldest first
	owner        string
	// floor is the highest attempt floor the session was given, and ended the highest
	// numbered attempt that ended for each lock, never forgotten.
	floor uint64
	ended map[string]uint64
}

type refFence struct{ lock, attempt string }

type refLock struct {
	limit  int        // a semaphore's limit; 0 for a lock
	holds  []refHold  // oldest first
	delays []refDelay // in the order they started
	queue  []fsm.Waiter
	modify uint64
}

// refHold is one grant of a lock.
type refHold struct {
	session fsm.SessionID
	token   uint64
	value   string
	shared  bool
}

// refDelay is a lock-delay: a grant that an expiry holds back.
type refDelay struct {
	until  int64
	length time.Duration
	index  uint64 // of the expiry that started it, once semaphores-rwlocks is enabled
	shared bool   // of a shared grant: it holds back exclusive grants only
}

func newRefModel() *refModel {
	return &refModel{
		sessions: map[fsm.SessionID]*refSession{},
		locks:    map[string]*refLock{},
		members:  map[string]fsm.Member{},
		policies: map[string]fsm.Policy{},
		tokens:   map[string]fsm.ACLToken{},
		features: map[fsm.Feature]bool{},
	}
}

// exists says whether a reader sees an entry for the lock: held, awaited or delayed.
func (l *refLock) exists() bool { return len(l.holds) > 0 || len(l.delays) > 0 || len(l.queue) > 0 }

// visible is what a reader sees of a lock, apart from its modify index: its grants, delays
// and limit, and how many wait.
type visible struct {
	holds, delays string
	limit         int
	waiters       int
}

func (l *refLock) visible() visible {
	if !l.exists() {
		return visible{}
	}
	return visible{fmt.Sprint(l.holds), fmt.Sprint(l.delays), l.limit, len(l.queue)}
}

// fits says whether a grant in the given mode may be made now: a semaphore has a permit that
// no grant and no delay takes; a lock takes an exclusive grant when it has no grant and no
// delay, a shared one when every grant and delay it has is shared.
func (l *refLock) fits(shared bool) bool {
	if l.limit > 0 {
		return len(l.holds)+len(l.delays) < l.limit
	}
	if !shared {
		return len(l.holds) == 0 && len(l.delays) == 0
	}
	for _, h := range l.holds {
		if !h.shared {
			return false
		}
	}
	for _, d := range l.delays {
		if !d.shared {
			return false
		}
	}
	return true
}

// holdOf returns the position of the session's grant, or -1.
func (l *refLock) holdOf(id fsm.SessionID) int {
	return slices.IndexFunc(l.holds, func(h refHold) bool { return h.session == id })
}

// earliest returns the earliest end of a delay, or 0.
func (l *refLock) earliest() int64 {
	var until int64
	for _, d := range l.delays {
		if until == 0 || d.until < until {
			until = d.until
		}
	}
	return until
}

// shared says whether the lock's grants and delays are shared ones.
func (l *refLock) shared() bool {
	for _, h := range l.holds {
		if h.shared {
			return true
		}
	}
	for _, d := range l.delays {
		if d.shared {
			return true
		}
	}
	return false
}

func (m *refModel) lock(name string) *refLock {
	l := m.locks[name]
	if l == nil {
		l = &refLock{}
		m.locks[name] = l
	}
	return l
}

// apply runs c at index and returns the result the state machine must give.
func (m *refModel) apply(index uint64, c fsm.Command) fsm.Result {
	m.index, m.grants, m.delays, m.expired = index, nil, nil, nil
	before := map[string]visible{}
	existed := map[string]bool{}
	for name, l := range m.locks {
		before[name], existed[name] = l.visible(), l.exists()
	}
	r := m.run(c)
	r.Index = index
	for name, l := range m.locks {
		if l.visible() != before[name] {
			l.modify = index
		}
		if existed[name] && !l.exists() {
			m.freed = index
		}
	}
	return r
}

func (m *refModel) run(c fsm.Command) fsm.Result {
	// The fields of a feature apply only once the feature is enabled.
	if !m.features[fsm.FeatureAttemptNumbers] {
		c.AttemptSeq, c.AttemptFloor = 0, 0
	}
	if !m.features[fsm.FeatureExpiryTerm] {
		c.Term = 0
	}
	if !m.features[fsm.FeatureSemaphoresRWLocks] {
		c.Limit, c.Shared, c.DelayIndex = 0, false, 0
	}
	if m.exact() && c.AttemptSeq == 0 {
		c.AttemptSeq = fsm.NumberedAttempt(c.Attempt) // "~N" is the numbered attempt N
	}
	switch c.Type {
	case fsm.TypeCreateSession:
		if m.sessions[c.Session] != nil {
			return fsm.Result{Status: fsm.StatusExists}
		}
		m.sessions[c.Session] = &refSession{name: c.Name, ttl: c.TTL, delay: c.LockDelay, createdIndex: m.index, owner: c.Owner, ended: map[string]uint64{}}
		return fsm.Result{}
	case fsm.TypeDestroySession:
		return m.end(c.Session, false, 0)
	case fsm.TypeExpireSession:
		if c.Term != 0 && c.Term < m.term {
			return fsm.Result{Status: fsm.StatusStaleTerm}
		}
		return m.end(c.Session, true, c.Now)
	case fsm.TypeAcquire:
		return m.acquire(c)
	case fsm.TypeRelease:
		s := m.sessions[c.Session]
		if s == nil {
			return fsm.Result{Status: fsm.StatusSessionNotFound}
		}
		m.endAttempts(s, c)
		l := m.lock(c.Lock)
		i := l.holdOf(c.Session)
		if i < 0 || l.holds[i].token != c.Token {
			return fsm.Result{Status: fsm.StatusNotHolder}
		}
		l.holds = slices.Delete(l.holds, i, i+1)
		m.handOff(c.Lock, l)
		return fsm.Result{}
	case fsm.TypeCancelWait:
		s := m.sessions[c.Session]
		if s == nil {
			return fsm.Result{Status: fsm.StatusSessionNotFound}
		}
		stale := m.exact() && s.hasEnded(c) // a cancel of an ended attempt takes nothing away
		m.endAttempts(s, c)
		l := m.lock(c.Lock)
		if i := l.holdOf(c.Session); i >= 0 {
			return fsm.Result{Token: l.holds[i].token, Value: l.holds[i].value}
		}
		for i, w := range l.queue {
			if stale {
				break
			}
			if w.Session == c.Session {
				l.queue = slices.Delete(l.queue, i, i+1)
				m.handOff(c.Lock, l)
				r := fsm.Result{Status: fsm.StatusCancelled, DelayUntil: l.earliest()}
				if n := len(l.holds); n > 0 {
					r = fsm.Result{Status: fsm.StatusCancelled, Holder: l.holds[n-1].session, Token: l.holds[n-1].token}
				}
				return r
			}
		}
		return fsm.Result{Status: fsm.StatusNotQueued}
	case fsm.TypeDelayEnded:
		return m.delayEnded(c)
	case fsm.TypeServeQueue:
		l := m.lock(c.Lock)
		if !l.ready() {
			return fsm.Result{Status: fsm.StatusNotQueued}
		}
		m.handOff(c.Lock, l)
		return fsm.Result{}
	case fsm.TypeSetMember:
		m.members[c.Member.ID] = c.Member
		return fsm.Result{}
	case fsm.TypeRemoveMember:
		delete(m.members, c.Member.ID)
		return fsm.Result{}
	case fsm.TypeACLBootstrap, fsm.TypeACLCreateToken, fsm.TypeACLDeleteToken, fsm.TypeACLSetPolicy, fsm.TypeACLDeletePolicy:
		return fsm.Result{Status: m.acl(c)}
	case fsm.TypeEnableFeatures:
		if len(c.Features) == 0 || !slices.IsSorted(c.Features) {
			return fsm.Result{Status: fsm.StatusInvalid}
		}
		for _, f := range c.Features {
			m.features[f] = true
		}
		return fsm.Result{}
	}
	panic("model: unknown command")
}

// acl applies an ACL command: the rules of SECURITY.md plus the refusals the state machine
// documents (a token's policies checked first, then its ids; the last management token kept).
func (m *refModel) acl(c fsm.Command) fsm.Status {
	switch c.Type {
	case fsm.TypeACLBootstrap:
		if m.bootstrapped {
			return fsm.StatusAlreadyBootstrapped
		}
		t := c.ACLToken
		t.Policies = []string{fsm.ManagementPolicy}
		st := m.addToken(t)
		m.bootstrapped = st == fsm.StatusOK
		return st
	case fsm.TypeACLCreateToken:
		t := c.ACLToken
		t.Policies = slices.Clone(t.Policies)
		for i, name := range t.Policies {
			if slices.Contains(t.Policies[:i], name) {
				return fsm.StatusInvalid
			}
			if _, ok := m.policies[name]; !ok && name != fsm.ManagementPolicy {
				return fsm.StatusPolicyNotFound
			}
		}
		return m.addToken(t)
	case fsm.TypeACLDeleteToken:
		t, ok := m.tokens[c.ACLToken.AccessorID]
		if !ok {
			return fsm.StatusNotFound
		}
		if slices.Contains(t.Policies, fsm.ManagementPolicy) {
			others := 0
			for _, o := range m.tokens {
				if o.AccessorID != t.AccessorID && slices.Contains(o.Policies, fsm.ManagementPolicy) {
					others++
				}
			}
			if others == 0 {
				return fsm.StatusLastManagement
			}
		}
		delete(m.tokens, t.AccessorID)
		if m.features[fsm.FeatureTokenDeleteDropsWaits] {
			// No wait admitted under the deleted token may be granted later; the waits of
			// the token's sessions end one at a time, session by session in id order.
			for _, id := range m.sessionIDs() {
				if m.sessions[id].owner == t.AccessorID {
					m.dropWaits(id)
				}
			}
		}
		return fsm.StatusOK
	case fsm.TypeACLSetPolicy:
		p := c.Policy
		if p.Name == fsm.ManagementPolicy {
			return fsm.StatusBuiltinPolicy
		}
		prefixes := map[string]bool{}
		for _, r := range p.Locks {
			if prefixes[r.Prefix] {
				return fsm.StatusInvalid
			}
			prefixes[r.Prefix] = true
		}
		if p.Name == "" {
			return fsm.StatusInvalid
		}
		old, exists := m.policies[p.Name]
		if exists && c.CreateOnly {
			return fsm.StatusExists
		}
		p.Locks = slices.Clone(p.Locks)
		if len(p.Locks) == 0 {
			p.Locks = nil
		}
		p.CreateIndex, p.ModifyIndex = m.index, m.index
		if exists {
			p.CreateIndex = old.CreateIndex
		}
		m.policies[p.Name] = p
		return fsm.StatusOK
	case fsm.TypeACLDeletePolicy:
		name := c.Policy.Name
		if name == fsm.ManagementPolicy {
			return fsm.StatusBuiltinPolicy
		}
		if _, ok := m.policies[name]; !ok {
			return fsm.StatusNotFound
		}
		delete(m.policies, name)
		for acc, t := range m.tokens {
			t.Policies = slices.DeleteFunc(slices.Clone(t.Policies), func(n string) bool { return n == name })
			if len(t.Policies) == 0 {
				t.Policies = nil
			}
			m.tokens[acc] = t
		}
		return fsm.StatusOK
	}
	panic("model: not an ACL command")
}

func (m *refModel) addToken(t fsm.ACLToken) fsm.Status {
	if t.AccessorID == "" {
		return fsm.StatusInvalid
	}
	for _, o := range m.tokens {
		if o.AccessorID == t.AccessorID || o.SecretHash == t.SecretHash {
			return fsm.StatusExists
		}
	}
	if len(t.Policies) == 0 {
		t.Policies = nil
	}
	t.CreateIndex = m.index
	m.tokens[t.AccessorID] = t
	return fsm.StatusOK
}

// fence records the end of an attempt: the last 16 are kept, oldest first.
func (s *refSession) fence(lock, attempt string) {
	if f := (refFence{lock, attempt}); attempt != "" && !slices.Contains(s.cancelled, f) {
		s.cancelled = append(s.cancelled, f)
		if len(s.cancelled) > 16 {
			s.cancelled = s.cancelled[1:]
		}
	}
}

// endAttempts records what a release or cancel-wait says has ended: its string attempt (one
// of the last 16, unless it is a "~N" the numbered record keeps), its numbered attempt and
// everything below its floor.
func (m *refModel) endAttempts(s *refSession, c fsm.Command) {
	s.floor = max(s.floor, c.AttemptFloor)
	if !m.exact() || c.AttemptSeq == 0 || c.AttemptSeq != fsm.NumberedAttempt(c.Attempt) {
		s.fence(c.Lock, c.Attempt)
	}
	s.ended[c.Lock] = max(s.ended[c.Lock], c.AttemptSeq)
}

// exact reports whether attempts end as the state machine decides (FeatureAttemptEnds with
// FeatureAttemptNumbers).
func (m *refModel) exact() bool {
	return m.features[fsm.FeatureAttemptEnds] && m.features[fsm.FeatureAttemptNumbers]
}

// hasEnded reports whether the attempt c names has ended (its floor already applied).
func (s *refSession) hasEnded(c fsm.Command) bool {
	return c.Attempt != "" && slices.Contains(s.cancelled, refFence{c.Lock, c.Attempt}) ||
		c.AttemptSeq != 0 && (c.AttemptSeq < s.floor || c.AttemptSeq <= s.ended[c.Lock])
}

// refuse answers an acquire refused for good, ending its numbered attempt under the exact rule.
func (m *refModel) refuse(s *refSession, c fsm.Command, r fsm.Result) fsm.Result {
	if m.exact() && c.AttemptSeq != 0 {
		m.endAttempts(s, c)
	}
	return r
}

func (m *refModel) acquire(c fsm.Command) fsm.Result {
	if c.Limit > fsm.MaxLimit || c.Shared && c.Limit > 1 {
		return fsm.Result{Status: fsm.StatusInvalid}
	}
	s := m.sessions[c.Session]
	if s == nil {
		return fsm.Result{Status: fsm.StatusSessionNotFound}
	}
	s.floor = max(s.floor, c.AttemptFloor)
	if s.hasEnded(c) {
		return fsm.Result{Status: fsm.StatusAttemptCancelled}
	}
	limit := int(c.Limit)
	if limit == 1 {
		limit = 0 // a semaphore of one is a lock
	}
	l := m.lock(c.Lock)
	if !l.exists() {
		l.limit = limit
	} else if l.limit != limit {
		return m.refuse(s, c, fsm.Result{Status: fsm.StatusLimitMismatch, Limit: uint32(max(l.limit, 1))})
	}
	if slices.ContainsFunc(l.delays, func(d refDelay) bool { return c.Now >= d.until }) {
		// The leader's clock says a delay is over: it ends now, and the queue goes first.
		l.delays = slices.DeleteFunc(l.delays, func(d refDelay) bool { return c.Now >= d.until })
		m.handOff(c.Lock, l)
	}
	if i := l.holdOf(c.Session); i >= 0 {
		if l.holds[i].shared != c.Shared {
			return m.refuse(s, c, fsm.Result{Status: fsm.StatusModeMismatch})
		}
		if c.SetValue {
			l.holds[i].value = c.Value
		}
		return fsm.Result{Token: l.holds[i].token, Value: l.holds[i].value}
	}
	if len(l.queue) == 0 && l.fits(c.Shared) && !m.grantedNow(l) {
		m.grant(c.Lock, l, c.Session, c.Value, c.Shared)
		return fsm.Result{Token: m.index, Value: c.Value}
	}
	queued := slices.IndexFunc(l.queue, func(w fsm.Waiter) bool { return w.Session == c.Session })
	if queued >= 0 && l.queue[queued].Shared != c.Shared {
		return m.refuse(s, c, fsm.Result{Status: fsm.StatusModeMismatch})
	}
	r := fsm.Result{Status: fsm.StatusLockDelayed, DelayUntil: l.earliest()}
	if n := len(l.holds); n > 0 {
		r = fsm.Result{Status: fsm.StatusLockHeld, Holder: l.holds[n-1].session, Token: l.holds[n-1].token}
	}
	if !c.Queue {
		return m.refuse(s, c, r)
	}
	r.Status = fsm.StatusQueued
	if queued >= 0 {
		if c.SetValue {
			l.queue[queued].Value = c.Value
		}
		return r
	}
	l.queue = append(l.queue, fsm.Waiter{Session: c.Session, Value: c.Value, Shared: c.Shared})
	return r
}

// delayEnded ends the delay the command names by its index or, without one, every delay that
// is over by the command's clock reading.
func (m *refModel) delayEnded(c fsm.Command) fsm.Result {
	l := m.lock(c.Lock)
	if len(l.delays) == 0 {
		return fsm.Result{}
	}
	if c.DelayIndex != 0 {
		i := slices.IndexFunc(l.delays, func(d refDelay) bool { return d.index == c.DelayIndex })
		if i < 0 {
			return fsm.Result{}
		}
		if c.Now < l.delays[i].until {
			return fsm.Result{Status: fsm.StatusLockDelayed, DelayUntil: l.delays[i].until}
		}
		l.delays = slices.Delete(l.delays, i, i+1)
	} else {
		over := func(d refDelay) bool { return c.Now >= d.until }
		if !slices.ContainsFunc(l.delays, over) {
			return fsm.Result{Status: fsm.StatusLockDelayed, DelayUntil: l.earliest()}
		}
		l.delays = slices.DeleteFunc(l.delays, over)
	}
	m.handOff(c.Lock, l)
	return fsm.Result{}
}

// dropWaits takes the session out of every queue, lock by lock in name order, each queue
// served after.
func (m *refModel) dropWaits(id fsm.SessionID) {
	for _, name := range m.lockNames() {
		l := m.locks[name]
		if i := slices.IndexFunc(l.queue, func(w fsm.Waiter) bool { return w.Session == id }); i >= 0 {
			l.queue = slices.Delete(l.queue, i, i+1)
			m.handOff(name, l)
		}
	}
}

func (m *refModel) end(id fsm.SessionID, expired bool, now int64) fsm.Result {
	s := m.sessions[id]
	if s == nil {
		return fsm.Result{Status: fsm.StatusSessionNotFound}
	}
	delete(m.sessions, id)
	m.dropWaits(id)
	var released []string
	for _, name := range m.lockNames() {
		l := m.locks[name]
		i := l.holdOf(id)
		if i < 0 {
			continue
		}
		released = append(released, name)
		h := l.holds[i]
		l.holds = slices.Delete(l.holds, i, i+1)
		if expired && s.delay > 0 {
			d := refDelay{until: now + int64(s.delay), length: s.delay, shared: h.shared}
			if d.until == 0 {
				d.until = 1
			}
			if m.features[fsm.FeatureSemaphoresRWLocks] {
				d.index = m.index
			}
			l.delays = append(l.delays, d)
			m.delays = append(m.delays, fsm.Event{Kind: fsm.EventDelayStarted, Lock: name, DelayUntil: d.until, Delay: s.delay})
		}
		m.handOff(name, l)
	}
	m.expired = append(m.expired, fsm.Event{Kind: fsm.EventSessionEnded, Session: id, Expired: expired})
	return fsm.Result{Released: released}
}

// handOff grants the first waiter if its grant fits and the command has not granted the
// lock yet: each grant has its own token, the index of its command, so further waiters that
// fit wait for a serve-queue each. Waiters are always live: ending a session removes its waits.
func (m *refModel) handOff(name string, l *refLock) {
	if !l.ready() || m.grantedNow(l) {
		return
	}
	w := l.queue[0]
	l.queue = l.queue[1:]
	if m.sessions[w.Session] == nil {
		panic("model: dead session in a queue")
	}
	m.grant(name, l, w.Session, w.Value, w.Shared)
}

// ready says whether the first waiter's grant fits.
func (l *refLock) ready() bool { return len(l.queue) > 0 && l.fits(l.queue[0].Shared) }

// grantedNow says whether the command being applied granted the lock already.
func (m *refModel) grantedNow(l *refLock) bool {
	return slices.ContainsFunc(l.holds, func(h refHold) bool { return h.token == m.index })
}

// readyQueues returns, sorted, the locks whose first waiter's grant fits.
func (m *refModel) readyQueues() []string {
	var out []string
	for _, name := range m.lockNames() {
		if m.locks[name].ready() {
			out = append(out, name)
		}
	}
	return out
}

func (m *refModel) grant(name string, l *refLock, id fsm.SessionID, value string, shared bool) {
	l.holds = append(l.holds, refHold{session: id, token: m.index, value: value, shared: shared})
	m.grants = append(m.grants, fsm.Event{Kind: fsm.EventGranted, Index: m.index, Lock: name, Session: id, Token: m.index})
}

func (m *refModel) sessionIDs() []fsm.SessionID {
	var ids []fsm.SessionID
	for id := range m.sessions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
	return ids
}

func (m *refModel) lockNames() []string {
	var names []string
	for name := range m.locks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

func (m *refModel) lockInfo(name string) fsm.LockInfo {
	l := m.locks[name]
	if l == nil || !l.exists() {
		return fsm.LockInfo{Name: name, ModifyIndex: m.freed}
	}
	info := fsm.LockInfo{Name: name, Waiters: len(l.queue), ModifyIndex: l.modify, DelayUntil: l.earliest(),
		Limit: uint32(l.limit), Shared: l.shared()}
	if n := len(l.holds); n > 0 {
		newest := l.holds[n-1]
		info.Held, info.Holder, info.Token, info.Value = true, newest.session, newest.token, newest.value
	}
	return info
}

// holders returns the lock's grants as FSM.Holders must list them.
func (m *refModel) holders(name string) []fsm.HolderInfo {
	l := m.locks[name]
	if l == nil {
		return nil
	}
	var out []fsm.HolderInfo
	for _, h := range l.holds {
		out = append(out, fsm.HolderInfo{Session: h.session, Token: h.token, Value: h.value, Shared: h.shared})
	}
	return out
}

// view returns what the read API must show.
func (m *refModel) view() view {
	v := view{Holders: map[string][]fsm.HolderInfo{}}
	for _, name := range m.lockNames() {
		l := m.locks[name]
		if !l.exists() {
			continue
		}
		v.Locks = append(v.Locks, m.lockInfo(name))
		if hs := m.holders(name); hs != nil {
			v.Holders[name] = hs
		}
		v.Stats.Locks++
		v.Stats.Waiters += len(l.queue)
		if len(l.holds) > 0 {
			v.Stats.Held++
		}
		for _, d := range l.delays {
			v.Delayed = append(v.Delayed, fsm.DelayedLock{Name: name, Until: d.until, Length: d.length, Index: d.index})
		}
	}
	ids := m.sessionIDs()
	for _, id := range ids {
		s := m.sessions[id]
		info := fsm.SessionInfo{ID: id, Name: s.name, TTL: s.ttl, LockDelay: s.delay, CreateIndex: s.createdIndex, Owner: s.owner}
		for _, name := range m.lockNames() {
			if m.locks[name].holdOf(id) >= 0 {
				info.Locks = append(info.Locks, name)
			}
			for _, w := range m.locks[name].queue {
				if w.Session == id {
					info.Waiting = append(info.Waiting, fsm.WaitInfo{Lock: name})
				}
			}
		}
		v.Sessions = append(v.Sessions, info)
	}
	v.Stats.Sessions = len(ids)
	var memberIDs []string
	for id := range m.members {
		memberIDs = append(memberIDs, id)
	}
	sort.Strings(memberIDs)
	for _, id := range memberIDs {
		v.Members = append(v.Members, m.members[id])
	}
	v.Absent = fsm.LockInfo{Name: "\x00never-used", ModifyIndex: m.freed}
	v.Bootstrapped = m.bootstrapped
	for _, t := range m.tokens {
		v.Tokens = append(v.Tokens, t)
	}
	sort.Slice(v.Tokens, func(i, j int) bool {
		a, b := v.Tokens[i], v.Tokens[j]
		return a.CreateIndex < b.CreateIndex || a.CreateIndex == b.CreateIndex && a.AccessorID < b.AccessorID
	})
	for _, p := range m.policies {
		v.Policies = append(v.Policies, p)
	}
	sort.Slice(v.Policies, func(i, j int) bool { return v.Policies[i].Name < v.Policies[j].Name })
	v.Owned = map[string]int{}
	for _, s := range m.sessions {
		if s.owner != "" {
			v.Owned[s.owner]++
		}
	}
	return v
}
