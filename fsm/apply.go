package fsm

import (
	"maps"
	"slices"
	"strconv"
	"time"
)

// applier applies one command at one index to the state and collects the events it causes.
// It changes a lock entry only through state.own, which keeps the entries a snapshot captured.
type applier struct {
	st     *state
	index  uint64
	term   uint64 // of the log entry
	events []Event
}

func (a *applier) emit(e Event) {
	e.Index = a.index
	a.events = append(a.events, e)
}

func (a *applier) apply(c *Command) Result {
	a.withoutDisabled(c)
	switch c.Type {
	case TypeCreateSession:
		return a.createSession(c)
	case TypeDestroySession:
		return a.endSession(c.Session, false, 0, 0)
	case TypeExpireSession:
		if c.Term != 0 && c.Term < a.term {
			// Decided by timers of a term this node lost and regained before the entry was
			// appended: the new term's timers decide again, from a full TTL.
			return Result{Status: StatusStaleTerm}
		}
		return a.endSession(c.Session, true, -1, c.Now)
	case TypeAcquire:
		return a.acquire(c)
	case TypeRelease:
		return a.release(c)
	case TypeCancelWait:
		return a.cancelWait(c)
	case TypeDelayEnded:
		return a.delayEnded(c)
	case TypeSetMember:
		a.st.members[c.Member.ID] = c.Member
		a.emit(Event{Kind: EventMembersChanged})
		return Result{}
	case TypeRemoveMember:
		delete(a.st.members, c.Member.ID)
		a.emit(Event{Kind: EventMembersChanged})
		return Result{}
	case TypeACLBootstrap:
		return a.aclBootstrap(c)
	case TypeACLCreateToken:
		return a.aclCreateToken(c)
	case TypeACLDeleteToken:
		return a.aclDeleteToken(c)
	case TypeACLSetPolicy:
		return a.aclSetPolicy(c)
	case TypeACLDeletePolicy:
		return a.aclDeletePolicy(c)
	case TypeEnableFeatures:
		return a.enableFeatures(c)
	case TypeServeQueue:
		return a.serveQueue(c)
	case TypeForceRelease:
		return a.forceRelease(c)
	}
	// DecodeCommand refuses unknown types, so this is unreachable for decoded commands.
	return Result{Err: ErrUnknownCommand}
}

// withoutDisabled clears the fields of features the cluster has not enabled. A leader proposes
// them only once their feature is enabled, so this changes only commands written by hand; it
// keeps the state from holding anything the snapshot format of its features cannot.
func (a *applier) withoutDisabled(c *Command) {
	if !a.st.features.has(FeatureAttemptNumbers) {
		c.AttemptSeq, c.AttemptFloor = 0, 0
	}
	if !a.st.features.has(FeatureExpiryTerm) {
		c.Term = 0
	}
	if !a.st.features.has(FeatureSemaphoresRWLocks) {
		c.Limit, c.Shared, c.DelayIndex = 0, false, 0
	}
	if c.AttemptSeq == 0 && a.exactAttempts() {
		// The string keeps its fence check too: one cancelled before the rule came.
		c.AttemptSeq = NumberedAttempt(c.Attempt)
	}
}

// exactAttempts reports whether attempts end as the state machine decides, and "~N" string
// attempts are numbered ones (FeatureAttemptEnds, with FeatureAttemptNumbers).
func (a *applier) exactAttempts() bool {
	return a.st.features.has(FeatureAttemptEnds) && a.st.features.has(FeatureAttemptNumbers)
}

// NumberedAttempt returns N for a string attempt of the form "~N" (N in decimal, from 1 to
// 2^63-1, without leading zeros), which names the numbered attempt N once FeatureAttemptEnds
// is enabled; 0 for any other string.
func NumberedAttempt(s string) uint64 {
	if len(s) < 2 || s[0] != '~' || s[1] < '1' || s[1] > '9' {
		return 0
	}
	n, err := strconv.ParseUint(s[1:], 10, 63)
	if err != nil {
		return 0
	}
	return n
}

// attemptHadEnded reports whether the attempt that c names ended before c.
func (ss *session) attemptHadEnded(c *Command) bool {
	return c.Attempt != "" && ss.fenced(c.Lock, c.Attempt) || c.AttemptSeq != 0 && ss.attemptEnded(c.Lock, c.AttemptSeq)
}

// refused answers an acquire refused for good with r, ending its numbered attempt first
// (FeatureAttemptEnds): the client ends it too, and a late request of it must not be granted
// to a session that no longer waits for it.
func (a *applier) refused(ss *session, c *Command, r Result) Result {
	if c.AttemptSeq != 0 && a.exactAttempts() {
		a.endAttempt(ss, c)
	}
	return r
}

func (a *applier) createSession(c *Command) Result {
	if c.Session.IsZero() {
		return Result{Err: ErrInvalidSessionID}
	}
	if _, ok := a.st.sessions[c.Session]; ok {
		return Result{Status: StatusExists}
	}
	a.st.addSession(&session{
		id:          c.Session,
		name:        c.Name,
		ttl:         c.TTL,
		lockDelay:   c.LockDelay,
		owner:       c.Owner,
		createIndex: a.index,
		gen:         a.st.gen,
	})
	a.emit(Event{Kind: EventSessionCreated, Session: c.Session, TTL: c.TTL})
	return Result{}
}

// endSession destroys or expires a session: its waits are dropped first (so that none of its
// own releases can hand a lock back to it), then its grants end, each handed to the next
// waiters unless a lock-delay of length delay holds it back (-1: the session's own lock-delay,
// as an expiry starts).
func (a *applier) endSession(id SessionID, expired bool, delay time.Duration, now int64) Result {
	ss := a.st.sessions[id]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	for _, name := range sortedKeys(ss.waits) {
		l := a.st.own(a.st.locks[name])
		l.waiters = a.removeWaiter(l.waiters, id)
		a.grantNext(name, l) // a waiting writer may have held readers back
		a.changed(name, l)
	}
	if delay < 0 {
		delay = ss.lockDelay
	}
	released := ss.heldNames()
	for _, name := range released {
		l := a.st.own(a.st.locks[name])
		a.ungrant(ss, name, l, l.holdOf(id))
		if delay > 0 {
			a.startDelay(name, l, delay, now)
		}
		a.grantNext(name, l)
		a.changed(name, l)
	}
	a.st.removeSession(ss)
	a.emit(Event{Kind: EventSessionEnded, Session: id, Expired: expired})
	return Result{Released: released}
}

// forceRelease applies a ForceRelease: the session that holds the lock under the command's
// token ends, and every lock it held stays unavailable for its TTL plus its lock-delay (see
// TypeForceRelease). A token that is not the session's grant of the lock changes nothing.
func (a *applier) forceRelease(c *Command) Result {
	if !a.st.features.has(FeatureForceRelease) {
		return Result{Status: StatusInvalid} // never proposed before it is enabled
	}
	ss := a.st.sessions[c.Session]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	l := a.st.locks[c.Lock]
	if l == nil {
		return Result{Status: StatusNotHolder}
	}
	if i := l.holdOf(c.Session); i < 0 {
		return Result{Status: StatusNotHolder}
	} else if token, _ := l.holdAt(i); token != c.Token {
		return Result{Status: StatusNotHolder}
	}
	r := a.endSession(c.Session, false, ss.ttl+ss.lockDelay, c.Now)
	r.Holder = c.Session
	if l := a.st.locks[c.Lock]; l != nil {
		r.DelayUntil = l.x.earliestUntil()
	}
	return r
}

// startDelay holds back, for length from the leader's clock reading now, the grant of l that
// an expiry just ended: of the same mode as l's holds were.
func (a *applier) startDelay(name string, l *lock, length time.Duration, now int64) {
	d := lockDelay{until: now + int64(length), length: length}
	if d.until == 0 {
		d.until = 1 // 0 means "not delayed"; see TestLockDelayEndingAtClockZeroStillDelays
	}
	if a.st.features.has(FeatureSemaphoresRWLocks) {
		d.index = a.index
	}
	x := l.ext()
	x.delays = append(x.delays, d)
	a.emit(Event{Kind: EventDelayStarted, Lock: name, DelayUntil: d.until, Delay: length, DelayIndex: d.index})
}

func (a *applier) acquire(c *Command) Result {
	if c.Limit > MaxLimit || c.Shared && c.Limit > 1 {
		return Result{Status: StatusInvalid}
	}
	ss := a.st.sessions[c.Session]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	ss = a.raiseFloor(ss, c.AttemptFloor)
	if ss.attemptHadEnded(c) {
		// A request of a try the client gave up, arriving late: it must not queue or grant.
		return Result{Status: StatusAttemptCancelled}
	}
	limit := c.Limit
	if limit == 1 {
		limit = 0 // a semaphore of one is a lock
	}
	l := a.st.locks[c.Lock]
	if l == nil {
		l = a.st.newLock(c.Lock)
		if limit > 0 {
			l.x = &lockExt{limit: limit}
		}
		a.st.addLock(l)
	} else if l.limit() != limit {
		// Fixed by the first acquire while the lock has holders, waiters or delays.
		return a.refused(ss, c, Result{Status: StatusLimitMismatch, Limit: max(l.limit(), 1)})
	}
	if l.x != nil && l.x.anyDue(c.Now) {
		// A delay is over but its DelayEnded is not applied yet: end it here, in queue order.
		// Only entries written before leaders left Now out of acquires get here (see Command.Now).
		l = a.st.own(l)
		l.x.endDue(c.Now)
		a.grantNext(c.Lock, l)
		a.touch(c.Lock, l) // not changed(): the entry must stay while this acquire uses it
	}
	if i := l.holdOf(c.Session); i >= 0 {
		// Re-acquire by a holder: the same grant, optionally a new value.
		if c.Shared != l.shared() {
			return a.refused(ss, c, Result{Status: StatusModeMismatch})
		}
		token, value := l.holdAt(i)
		if c.SetValue && c.Value != value {
			l = a.st.own(l)
			a.setValue(ss, l, i, c.Value)
			a.changed(c.Lock, l)
			value = c.Value
		}
		return Result{Token: token, Value: value}
	}
	if len(l.waiters) == 0 && l.fits(c.Shared) && !l.grantedAt(a.index) {
		l = a.st.own(l)
		a.grant(c.Lock, l, ss, c.Value, c.Shared)
		a.changed(c.Lock, l)
		return Result{Token: a.index, Value: c.Value}
	}
	return a.queueOrRefuse(c, ss, l)
}

// queueOrRefuse ends an acquire that cannot be granted now: refused, or with Queue, queued
// (or kept in its place in the queue).
func (a *applier) queueOrRefuse(c *Command, ss *session, l *lock) Result {
	_, queued := ss.waits[c.Lock]
	w := -1
	if queued {
		// ss.waits answers "queued?" without scanning the queue, which made each join cost
		// O(queue length).
		if w = indexOfWaiter(l.waiters, c.Session); w >= 0 && l.waiters[w].shared != c.Shared {
			return a.refused(ss, c, Result{Status: StatusModeMismatch})
		}
	}
	res := a.refusal(l)
	if !c.Queue {
		a.dropIfIdle(l)
		return a.refused(ss, c, res)
	}
	l = a.st.own(l)
	if queued {
		// Already queued: keep the place, take the newest value.
		if w >= 0 && c.SetValue {
			l.waiters[w].value = c.Value
		}
	} else {
		l.waiters = append(l.waiters, waiter{session: c.Session, value: c.Value, shared: c.Shared})
		a.st.waiters++
		if len(l.waiters) == 1 && l.fits(c.Shared) {
			// Refused only because this command granted the lock already (see grantNext).
			a.emit(Event{Kind: EventQueueReady, Lock: c.Lock})
		}
		if ss.waits == nil {
			ss.waits = make(map[string]struct{})
		}
		ss.waits[c.Lock] = struct{}{}
		a.changed(c.Lock, l)
	}
	res.Status = StatusQueued
	return res
}

// refusal says why an acquire of l cannot be granted now: the lock is held (naming its newest
// grant), or all it has are delays.
func (a *applier) refusal(l *lock) Result {
	if !l.held {
		return Result{Status: StatusLockDelayed, DelayUntil: l.x.earliestUntil()}
	}
	if l.x != nil && len(l.x.more) > 0 {
		h := l.x.more[len(l.x.more)-1]
		return Result{Status: StatusLockHeld, Holder: h.session, Token: h.token}
	}
	return Result{Status: StatusLockHeld, Holder: l.holder, Token: l.token}
}

func (a *applier) release(c *Command) Result {
	ss := a.st.sessions[c.Session]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	ss = a.endAttempt(ss, c)
	l := a.st.locks[c.Lock]
	i := -1
	if l != nil {
		i = l.holdOf(c.Session)
	}
	if i < 0 {
		return Result{Status: StatusNotHolder}
	}
	if token, _ := l.holdAt(i); token != c.Token {
		return Result{Status: StatusNotHolder}
	}
	l = a.st.own(l)
	a.ungrant(ss, c.Lock, l, i)
	a.grantNext(c.Lock, l)
	a.changed(c.Lock, l)
	return Result{}
}

// endAttempt records that the attempts a release or cancel-wait names have ended, so that
// their later acquires are refused: its string attempt, its numbered attempt (and every lower
// one of that lock) and, through its floor, every attempt below the floor. It returns the
// session as it is now.
func (a *applier) endAttempt(ss *session, c *Command) *session {
	ss = a.raiseFloor(ss, c.AttemptFloor)
	if c.Attempt != "" && !ss.fenced(c.Lock, c.Attempt) && !(a.exactAttempts() && c.AttemptSeq != 0 && c.AttemptSeq == NumberedAttempt(c.Attempt)) {
		// (A "~N" string under FeatureAttemptEnds is recorded by its number, never forgotten.)
		ss = a.st.ownSession(ss)
		ss.fences = ss.withFence(fence{c.Lock, c.Attempt})
	}
	if seq := c.AttemptSeq; seq != 0 && !ss.attemptEnded(c.Lock, seq) {
		ss = a.st.ownSession(ss)
		if ss.ended == nil {
			ss.ended = make(map[string]uint64)
		}
		ss.ended[c.Lock] = seq
	}
	return ss
}

// raiseFloor raises the session's attempt floor to floor, if that is higher, and forgets the
// ended attempts that the floor now covers. It returns the session as it is now.
func (a *applier) raiseFloor(ss *session, floor uint64) *session {
	if floor <= ss.attemptFloor {
		return ss
	}
	ss = a.st.ownSession(ss)
	ss.attemptFloor = floor
	maps.DeleteFunc(ss.ended, func(_ string, seq uint64) bool { return seq < floor })
	return ss
}

func (a *applier) cancelWait(c *Command) Result {
	ss := a.st.sessions[c.Session]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	// A cancel of an attempt that had already ended (a late copy of one applied before, say)
	// changes nothing (FeatureAttemptEnds): the session's queue entry, if any, is a newer
	// attempt's.
	stale := a.exactAttempts() && ss.attemptHadEnded(c)
	// Recorded whatever the queue holds: the request to fence may not be proposed yet.
	ss = a.endAttempt(ss, c)
	l := a.st.locks[c.Lock]
	if l == nil {
		return Result{Status: StatusNotQueued}
	}
	if i := l.holdOf(c.Session); i >= 0 {
		// The grant won the race with the end of the wait: report it, never lose it.
		token, value := l.holdAt(i)
		return Result{Token: token, Value: value}
	}
	i := indexOfWaiter(l.waiters, c.Session)
	if i < 0 || stale {
		return Result{Status: StatusNotQueued}
	}
	l = a.st.own(l)
	l.waiters = a.removeWaiter(l.waiters, c.Session)
	delete(ss.waits, c.Lock)
	a.grantNext(c.Lock, l) // a waiting writer may have held readers back
	a.changed(c.Lock, l)
	// Why the wait ended without a grant, as of this command (the newest holder, or the
	// lock-delay), like a queued acquire's answer: the state a caller reads later may differ.
	r := a.refusal(l)
	r.Status = StatusCancelled
	return r
}

// delayEnded ends the lock-delay that the command names (by the index of the expiry that
// started it), or, in the form without an index, every delay of the lock that is over by the
// command's clock reading; then the next waiters are granted.
func (a *applier) delayEnded(c *Command) Result {
	l := a.st.locks[c.Lock]
	if l == nil || !l.delayed() {
		return Result{}
	}
	x := l.x
	if c.DelayIndex != 0 {
		j := x.delayIndex(c.DelayIndex)
		if j < 0 {
			return Result{}
		}
		if until := x.delays[j].until; c.Now < until {
			return Result{Status: StatusLockDelayed, DelayUntil: until}
		}
		l = a.st.own(l)
		l.x.delays = slices.Delete(l.x.delays, j, j+1)
	} else {
		if !x.anyDue(c.Now) {
			return Result{Status: StatusLockDelayed, DelayUntil: x.earliestUntil()}
		}
		l = a.st.own(l)
		l.x.endDue(c.Now)
	}
	a.grantNext(c.Lock, l)
	a.changed(c.Lock, l)
	return Result{}
}

// grantNext grants the first waiter of l's queue whose session is alive, if its grant fits.
// A command grants a lock at most once, so that every grant has its own token (its index):
// when more waiters fit, or this command already granted l, it reports the queue ready, and
// the leader proposes a ServeQueue for each further grant.
func (a *applier) grantNext(name string, l *lock) {
	for len(l.waiters) > 0 && l.fits(l.waiters[0].shared) {
		if l.grantedAt(a.index) {
			a.emit(Event{Kind: EventQueueReady, Lock: name})
			return
		}
		w := l.waiters[0]
		l.waiters = l.waiters[1:]
		a.st.waiters--
		if len(l.waiters) == 0 {
			l.waiters = nil
		}
		ss := a.st.sessions[w.session]
		if ss == nil {
			continue // unreachable while ending a session drops its waits; kept as a guard
		}
		delete(ss.waits, name)
		a.grant(name, l, ss, w.value, w.shared)
	}
}

// serveQueue applies a ServeQueue: the next waiter of the lock is granted if it fits.
func (a *applier) serveQueue(c *Command) Result {
	l := a.st.locks[c.Lock]
	if l == nil || len(l.waiters) == 0 || !l.fits(l.waiters[0].shared) {
		return Result{Status: StatusNotQueued}
	}
	l = a.st.own(l)
	a.grantNext(c.Lock, l)
	a.changed(c.Lock, l)
	return Result{}
}

// changed records that l's visible state changed at this index, and removes it if it is idle.
func (a *applier) changed(name string, l *lock) {
	a.touch(name, l)
	a.dropIfIdle(l)
}

// touch records that l's visible state changed at this index.
func (a *applier) touch(name string, l *lock) {
	l.tidy()
	l.modifyIndex = a.index
	a.emit(Event{Kind: EventLockChanged, Lock: name})
}

func (a *applier) dropIfIdle(l *lock) {
	if !l.held && !l.delayed() && len(l.waiters) == 0 {
		a.st.removeLock(l)
		if l.modifyIndex != 0 {
			a.st.freedIndex = a.index
		}
	}
}

func indexOfWaiter(ws []waiter, id SessionID) int {
	for i := range ws {
		if ws[i].session == id {
			return i
		}
	}
	return -1
}

func (a *applier) removeWaiter(ws []waiter, id SessionID) []waiter {
	i := indexOfWaiter(ws, id)
	if i < 0 {
		return ws
	}
	a.st.waiters--
	ws = append(ws[:i], ws[i+1:]...)
	if len(ws) == 0 {
		return nil
	}
	return ws
}
