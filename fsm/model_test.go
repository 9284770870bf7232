package fsm_test

import (
	"bytes"
	"math/rand"
	"slices"
	"sort"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// refModel is a deliberately simple reference implementation of the lock rules (issue 2,
// section 1, and docs/api.md), written from the rules and not from the fsm code: it keeps
// every lock it has ever seen, recomputes the modify index by comparing what a reader sees
// before and after each command, and scans everything instead of keeping indexes.
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
	held       bool
	holder     fsm.SessionID
	token      uint64
	value      string
	delayUntil int64
	delayFor   time.Duration // the length of the delay until delayUntil
	queue      []fsm.Waiter
	modify     uint64
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
func (l *refLock) exists() bool { return l.held || l.delayUntil != 0 || len(l.queue) > 0 }

// visible is what a reader sees of a lock, apart from its modify index.
type visible struct {
	held       bool
	holder     fsm.SessionID
	token      uint64
	value      string
	waiters    int
	delayUntil int64
}

func (l *refLock) visible() visible {
	return visible{l.held, l.holder, l.token, l.value, len(l.queue), l.delayUntil}
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
		s.endAttempts(c)
		l := m.lock(c.Lock)
		if !l.held || l.holder != c.Session || l.token != c.Token {
			return fsm.Result{Status: fsm.StatusNotHolder}
		}
		m.free(l)
		m.handOff(c.Lock, l)
		return fsm.Result{}
	case fsm.TypeCancelWait:
		s := m.sessions[c.Session]
		if s == nil {
			return fsm.Result{Status: fsm.StatusSessionNotFound}
		}
		s.endAttempts(c)
		l := m.lock(c.Lock)
		if l.held && l.holder == c.Session {
			return fsm.Result{Token: l.token, Value: l.value}
		}
		for i, w := range l.queue {
			if w.Session == c.Session {
				l.queue = slices.Delete(l.queue, i, i+1)
				return fsm.Result{Status: fsm.StatusCancelled}
			}
		}
		return fsm.Result{Status: fsm.StatusNotQueued}
	case fsm.TypeDelayEnded:
		l := m.lock(c.Lock)
		if l.delayUntil == 0 {
			return fsm.Result{}
		}
		if c.Now < l.delayUntil {
			return fsm.Result{Status: fsm.StatusLockDelayed, DelayUntil: l.delayUntil}
		}
		l.delayUntil = 0
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
			// No wait admitted under the deleted token may be granted later.
			for _, l := range m.locks {
				l.queue = slices.DeleteFunc(l.queue, func(w fsm.Waiter) bool { return m.sessions[w.Session].owner == t.AccessorID })
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
// of the last 16), its numbered attempt and everything below its floor.
func (s *refSession) endAttempts(c fsm.Command) {
	s.floor = max(s.floor, c.AttemptFloor)
	s.fence(c.Lock, c.Attempt)
	s.ended[c.Lock] = max(s.ended[c.Lock], c.AttemptSeq)
}

func (m *refModel) acquire(c fsm.Command) fsm.Result {
	s := m.sessions[c.Session]
	if s == nil {
		return fsm.Result{Status: fsm.StatusSessionNotFound}
	}
	s.floor = max(s.floor, c.AttemptFloor)
	if c.Attempt != "" && slices.Contains(s.cancelled, refFence{c.Lock, c.Attempt}) ||
		c.AttemptSeq != 0 && (c.AttemptSeq < s.floor || c.AttemptSeq <= s.ended[c.Lock]) {
		return fsm.Result{Status: fsm.StatusAttemptCancelled}
	}
	l := m.lock(c.Lock)
	if !l.held && l.delayUntil != 0 && c.Now >= l.delayUntil {
		// The leader's clock says the delay is over: it ends now, and the queue goes first.
		l.delayUntil = 0
		m.handOff(c.Lock, l)
	}
	if l.held && l.holder == c.Session {
		if c.SetValue {
			l.value = c.Value
		}
		return fsm.Result{Token: l.token, Value: l.value}
	}
	if !l.held && l.delayUntil == 0 && len(l.queue) == 0 {
		m.grant(c.Lock, l, c.Session, c.Value)
		return fsm.Result{Token: l.token, Value: l.value}
	}
	r := fsm.Result{Status: fsm.StatusLockDelayed, DelayUntil: l.delayUntil}
	if l.held {
		r = fsm.Result{Status: fsm.StatusLockHeld, Holder: l.holder, Token: l.token}
	}
	if !c.Queue {
		return r
	}
	r.Status = fsm.StatusQueued
	for i := range l.queue {
		if l.queue[i].Session == c.Session {
			if c.SetValue {
				l.queue[i].Value = c.Value
			}
			return r
		}
	}
	l.queue = append(l.queue, fsm.Waiter{Session: c.Session, Value: c.Value})
	return r
}

func (m *refModel) end(id fsm.SessionID, expired bool, now int64) fsm.Result {
	s := m.sessions[id]
	if s == nil {
		return fsm.Result{Status: fsm.StatusSessionNotFound}
	}
	delete(m.sessions, id)
	names := m.lockNames()
	for _, name := range names {
		l := m.locks[name]
		l.queue = slices.DeleteFunc(l.queue, func(w fsm.Waiter) bool { return w.Session == id })
	}
	var released []string
	for _, name := range names {
		l := m.locks[name]
		if !l.held || l.holder != id {
			continue
		}
		released = append(released, name)
		m.free(l)
		if expired && s.delay > 0 {
			l.delayUntil, l.delayFor = now+int64(s.delay), s.delay
			m.delays = append(m.delays, fsm.Event{Kind: fsm.EventDelayStarted, Lock: name, DelayUntil: l.delayUntil, Delay: s.delay})
		} else {
			m.handOff(name, l)
		}
	}
	m.expired = append(m.expired, fsm.Event{Kind: fsm.EventSessionEnded, Session: id, Expired: expired})
	return fsm.Result{Released: released}
}

func (m *refModel) free(l *refLock) {
	l.held, l.holder, l.token, l.value = false, fsm.SessionID{}, 0, ""
}

// handOff grants a free, undelayed lock to the first waiter. Waiters are always live: ending a
// session removes its waits.
func (m *refModel) handOff(name string, l *refLock) {
	if l.held || l.delayUntil != 0 || len(l.queue) == 0 {
		return
	}
	w := l.queue[0]
	l.queue = l.queue[1:]
	if m.sessions[w.Session] == nil {
		panic("model: dead session in a queue")
	}
	m.grant(name, l, w.Session, w.Value)
}

func (m *refModel) grant(name string, l *refLock, id fsm.SessionID, value string) {
	l.held, l.holder, l.token, l.value = true, id, m.index, value
	m.grants = append(m.grants, fsm.Event{Kind: fsm.EventGranted, Index: m.index, Lock: name, Session: id, Token: m.index})
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
	return fsm.LockInfo{Name: name, Held: l.held, Holder: l.holder, Token: l.token, Value: l.value,
		Waiters: len(l.queue), ModifyIndex: l.modify, DelayUntil: l.delayUntil}
}

// view returns what the read API must show.
func (m *refModel) view() view {
	var v view
	for _, name := range m.lockNames() {
		l := m.locks[name]
		if !l.exists() {
			continue
		}
		v.Locks = append(v.Locks, m.lockInfo(name))
		v.Stats.Locks++
		v.Stats.Waiters += len(l.queue)
		if l.held {
			v.Stats.Held++
		}
		if l.delayUntil != 0 {
			v.Delayed = append(v.Delayed, fsm.DelayedLock{Name: name, Until: l.delayUntil, Length: l.delayFor})
		}
	}
	var ids []fsm.SessionID
	for id := range m.sessions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
	for _, id := range ids {
		s := m.sessions[id]
		info := fsm.SessionInfo{ID: id, Name: s.name, TTL: s.ttl, LockDelay: s.delay, CreateIndex: s.createdIndex, Owner: s.owner}
		for _, name := range m.lockNames() {
			if l := m.locks[name]; l.held && l.holder == id {
				info.Locks = append(info.Locks, name)
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

// gen draws random commands over a few sessions and locks, so that they collide often.
type gen struct {
	rng   *rand.Rand
	m     *refModel
	index uint64
	term  uint64 // of the entry next returns
	now   int64
}

var (
	genLocks  = []string{"a", "b", "jobs/c", "jobs/d", "e"}
	genValues = []string{"", "v1", "v2"}
	genDelays = []time.Duration{0, 200 * time.Millisecond, time.Second}
	// Five locks by five attempts make more fences than a session keeps.
	genAttempts = []string{"t1", "t2", "t3", "t4", "t5"}
	// A few accessors, secrets and policy names, so that ACL commands collide often; "" and
	// the built-in name are among them, for the refusals.
	genAccessors = []string{"acc-1", "acc-2", "acc-3", ""}
	genSecrets   = []string{"s1", "s2", "s3", "s4", "s5"}
	genPolicies  = []string{"p1", "p2", fsm.ManagementPolicy, ""}
	genPrefixes  = []string{"", "jobs/", "jobs/c", "a"}
	genOwners    = []string{"", "acc-1", "acc-2"}
)

func (g *gen) pick(from []string) string { return from[g.rng.Intn(len(from))] }

// enableFeatures draws an enable-features command: one or two features, sorted, or now and
// then an invalid one (none, or out of order).
func (g *gen) enableFeatures() fsm.Command {
	all := fsm.AllFeatures()
	c := fsm.Command{Type: fsm.TypeEnableFeatures}
	for n := g.rng.Intn(3); n > 0; n-- {
		c.Features = append(c.Features, all[g.rng.Intn(len(all))])
	}
	if g.rng.Intn(4) != 0 {
		slices.Sort(c.Features)
		c.Features = slices.Compact(c.Features)
	}
	return c
}

// aclCommand draws an ACL command.
func (g *gen) aclCommand() fsm.Command {
	tok := fsm.ACLToken{AccessorID: g.pick(genAccessors), SecretHash: fsm.HashSecret(g.pick(genSecrets)), Description: g.pick(genValues)}
	switch g.rng.Intn(5) {
	case 0:
		return fsm.Command{Type: fsm.TypeACLBootstrap, ACLToken: tok}
	case 1:
		for n := g.rng.Intn(3); n > 0; n-- {
			tok.Policies = append(tok.Policies, g.pick(genPolicies[:3]))
		}
		return fsm.Command{Type: fsm.TypeACLCreateToken, ACLToken: tok}
	case 2:
		return fsm.Command{Type: fsm.TypeACLDeleteToken, ACLToken: fsm.ACLToken{AccessorID: tok.AccessorID}}
	case 3:
		p := fsm.Policy{Name: g.pick(genPolicies), Operator: fsm.Access(g.rng.Intn(3))}
		for n := g.rng.Intn(3); n > 0; n-- {
			p.Locks = append(p.Locks, fsm.LockRule{Prefix: g.pick(genPrefixes), Access: fsm.Access(g.rng.Intn(3))})
		}
		return fsm.Command{Type: fsm.TypeACLSetPolicy, Policy: p, CreateOnly: g.rng.Intn(2) == 0}
	}
	return fsm.Command{Type: fsm.TypeACLDeletePolicy, Policy: fsm.Policy{Name: g.pick(genPolicies)}}
}

// attempt returns an attempt half of the time, none the other half.
func (g *gen) attempt() string {
	if g.rng.Intn(2) == 0 {
		return ""
	}
	return genAttempts[g.rng.Intn(len(genAttempts))]
}

// numbered sets, now and then, a numbered attempt and a floor on c. The numbers grow slowly
// and are drawn from a window behind the highest, so that late requests of ended attempts and
// attempts below the floor are common.
func (g *gen) numbered(c *fsm.Command) {
	if g.rng.Intn(3) == 0 {
		return
	}
	top := g.index/8 + 1
	c.AttemptSeq = top - min(top-1, uint64(g.rng.Intn(6)))
	if g.rng.Intn(4) == 0 {
		c.AttemptFloor = top - min(top-1, uint64(g.rng.Intn(10)))
	}
}

const genSessions = 7

// session picks a live session most of the time, so that commands mostly get past the
// session check.
func (g *gen) session() fsm.SessionID {
	if g.rng.Intn(8) != 0 {
		var live []fsm.SessionID
		for i := 1; i <= genSessions; i++ {
			if g.m.sessions[sid(i)] != nil {
				live = append(live, sid(i))
			}
		}
		if len(live) > 0 {
			return live[g.rng.Intn(len(live))]
		}
	}
	return sid(1 + g.rng.Intn(genSessions))
}

func (g *gen) deadSession() fsm.SessionID {
	for i := 0; i < genSessions; i++ {
		if id := sid(1 + g.rng.Intn(genSessions)); g.m.sessions[id] == nil {
			return id
		}
	}
	return sid(1 + g.rng.Intn(genSessions))
}

func (g *gen) lockName() string { return genLocks[g.rng.Intn(len(genLocks))] }

// next returns the next command and its log index. Indexes have gaps (raft's own entries);
// the leader's clock moves forward and sometimes back (a new leader whose clock is behind).
func (g *gen) next() (uint64, fsm.Command) {
	g.index += 1 + uint64(g.rng.Intn(3))
	if g.term == 0 || g.rng.Intn(40) == 0 {
		g.term++ // a new leader
	}
	if g.rng.Intn(20) == 0 {
		g.now -= int64(g.rng.Intn(300)) * int64(time.Millisecond)
	} else {
		g.now += int64(g.rng.Intn(150)) * int64(time.Millisecond)
	}
	c := fsm.Command{Now: g.now}
	switch p := g.rng.Intn(110); {
	case p >= 108:
		return g.index, g.enableFeatures()
	case p >= 100:
		return g.index, g.aclCommand()
	case p < 10:
		c.Type, c.Session = fsm.TypeCreateSession, g.deadSession()
		c.Owner = g.pick(genOwners)
		c.Name = genValues[g.rng.Intn(len(genValues))]
		c.TTL = time.Duration(1+g.rng.Intn(10)) * time.Second
		c.LockDelay = genDelays[g.rng.Intn(len(genDelays))]
		c.Now = 0
	case p < 14:
		c.Type, c.Session, c.Now = fsm.TypeDestroySession, g.session(), 0
	case p < 20:
		c.Type, c.Session = fsm.TypeExpireSession, g.session()
		if g.rng.Intn(2) == 0 {
			// Decided in this entry's term, or by a timer of an earlier one.
			c.Term = g.term - uint64(g.rng.Intn(int(min(g.term, 2))))
		}
	case p < 52:
		c.Type, c.Session, c.Lock = fsm.TypeAcquire, g.session(), g.lockName()
		c.Queue = g.rng.Intn(2) == 0
		c.Attempt = g.attempt()
		g.numbered(&c)
		if g.rng.Intn(2) == 0 {
			c.SetValue, c.Value = true, genValues[g.rng.Intn(len(genValues))]
		}
	case p < 72:
		c.Type, c.Lock = fsm.TypeRelease, g.lockName()
		c.Attempt = g.attempt()
		g.numbered(&c)
		l := g.m.locks[c.Lock]
		if l != nil && l.held && g.rng.Intn(10) < 7 {
			c.Session, c.Token = l.holder, l.token // mostly the real holder and token
			if g.rng.Intn(10) == 0 {
				c.Token-- // or a stale token
			}
		} else {
			c.Session, c.Token = g.session(), uint64(g.rng.Intn(int(g.index)+1))
		}
		c.Now = 0
	case p < 80:
		c.Type, c.Session, c.Lock, c.Now = fsm.TypeCancelWait, g.session(), g.lockName(), 0
		c.Attempt = g.attempt()
		g.numbered(&c)
		if l := g.m.locks[c.Lock]; l != nil && len(l.queue) > 0 && g.rng.Intn(3) != 0 {
			c.Session = l.queue[g.rng.Intn(len(l.queue))].Session // mostly someone who waits
		}
	case p < 90:
		c.Type, c.Lock = fsm.TypeDelayEnded, g.lockName()
		if l := g.m.locks[c.Lock]; l != nil && l.delayUntil != 0 && g.rng.Intn(2) == 0 {
			c.Now = l.delayUntil + int64(g.rng.Intn(3)) - 1 // right at the edge
		}
	case p < 93:
		c.Type, c.Now = fsm.TypeSetMember, 0
		c.Member = fsm.Member{ID: []string{"n1", "n2", "n3"}[g.rng.Intn(3)], RaftAddr: genValues[g.rng.Intn(3)], HTTPAddr: "h"}
	case p < 97:
		c.Type, c.Now = fsm.TypeRemoveMember, 0
		c.Member.ID = []string{"n1", "n2", "n3"}[g.rng.Intn(3)]
	default:
		// An acquire by a session that does not exist and never will.
		c.Type, c.Session, c.Lock = fsm.TypeAcquire, sid(1000), g.lockName()
	}
	return g.index, c
}
