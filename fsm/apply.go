package fsm

import "maps"

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
		return a.endSession(c.Session, false, 0)
	case TypeExpireSession:
		if c.Term != 0 && c.Term < a.term {
			// Decided by timers of a term this node lost and regained before the entry was
			// appended: the new term's timers decide again, from a full TTL.
			return Result{Status: StatusStaleTerm}
		}
		return a.endSession(c.Session, true, c.Now)
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
// own releases can hand a lock back to it), then its locks are released, each to its first
// waiter unless an expiry puts the lock under lock-delay.
func (a *applier) endSession(id SessionID, expired bool, now int64) Result {
	ss := a.st.sessions[id]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	for _, name := range sortedKeys(ss.waits) {
		l := a.st.own(a.st.locks[name])
		l.waiters = a.removeWaiter(l.waiters, id)
		a.changed(name, l)
	}
	released := ss.heldNames()
	for _, name := range released {
		l := a.st.own(a.st.locks[name])
		a.clearHolder(ss, name, l)
		if expired && ss.lockDelay > 0 {
			l.delay = &lockDelay{until: now + int64(ss.lockDelay), length: ss.lockDelay}
			if l.delay.until == 0 {
				l.delay.until = 1 // 0 means "not delayed"; see TestLockDelayEndingAtClockZeroStillDelays
			}
			a.emit(Event{Kind: EventDelayStarted, Lock: name, DelayUntil: l.delay.until, Delay: ss.lockDelay})
		} else {
			a.grantNext(name, l)
		}
		a.changed(name, l)
	}
	a.st.removeSession(ss)
	a.emit(Event{Kind: EventSessionEnded, Session: id, Expired: expired})
	return Result{Released: released}
}

func (a *applier) acquire(c *Command) Result {
	ss := a.st.sessions[c.Session]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	ss = a.raiseFloor(ss, c.AttemptFloor)
	if c.Attempt != "" && ss.fenced(c.Lock, c.Attempt) || c.AttemptSeq != 0 && ss.attemptEnded(c.Lock, c.AttemptSeq) {
		// A request of a try the client gave up, arriving late: it must not queue or grant.
		return Result{Status: StatusAttemptCancelled}
	}
	l := a.st.locks[c.Lock]
	if l == nil {
		l = a.st.newLock(c.Lock)
		a.st.addLock(l)
	}
	if !l.held && l.delay != nil && c.Now >= l.delay.until {
		// The delay is over but its DelayEnded is not applied yet: end it here, in queue order.
		// Only entries written before leaders left Now out of acquires get here (see Command.Now).
		l = a.st.own(l)
		l.delay = nil
		a.grantNext(c.Lock, l)
		a.touch(c.Lock, l) // not changed(): the entry must stay while this acquire uses it
	}
	if l.held && l.holder == c.Session {
		// Idempotent re-acquire: same grant, optionally a new value.
		if c.SetValue && c.Value != l.value {
			l = a.st.own(l)
			l.value = c.Value
			a.changed(c.Lock, l)
		}
		return Result{Token: l.token, Value: l.value}
	}
	if !l.held && l.delay == nil && len(l.waiters) == 0 {
		l = a.st.own(l)
		a.grant(c.Lock, l, ss, c.Value)
		a.changed(c.Lock, l)
		return Result{Token: l.token, Value: l.value}
	}
	res := Result{Status: StatusLockHeld, Holder: l.holder, Token: l.token}
	if !l.held {
		res = Result{Status: StatusLockDelayed, DelayUntil: l.delay.untilOrZero()}
	}
	if !c.Queue {
		a.dropIfIdle(l)
		return res
	}
	l = a.st.own(l)
	if _, queued := ss.waits[c.Lock]; queued {
		// Already queued: keep the place, take the newest value. ss.waits answers "queued?"
		// without scanning the queue, which made each join cost O(queue length).
		if i := indexOfWaiter(l.waiters, c.Session); i >= 0 && c.SetValue {
			l.waiters[i].value = c.Value
		}
	} else {
		l.waiters = append(l.waiters, waiter{session: c.Session, value: c.Value})
		a.st.waiters++
		if ss.waits == nil {
			ss.waits = make(map[string]struct{})
		}
		ss.waits[c.Lock] = struct{}{}
		a.changed(c.Lock, l)
	}
	res.Status = StatusQueued
	return res
}

func (a *applier) release(c *Command) Result {
	ss := a.st.sessions[c.Session]
	if ss == nil {
		return Result{Status: StatusSessionNotFound}
	}
	ss = a.endAttempt(ss, c)
	l := a.st.locks[c.Lock]
	if l == nil || !l.held || l.holder != c.Session || l.token != c.Token {
		return Result{Status: StatusNotHolder}
	}
	l = a.st.own(l)
	a.clearHolder(ss, c.Lock, l)
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
	if c.Attempt != "" && !ss.fenced(c.Lock, c.Attempt) {
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
	// Recorded whatever the queue holds: the request to fence may not be proposed yet.
	ss = a.endAttempt(ss, c)
	l := a.st.locks[c.Lock]
	if l == nil {
		return Result{Status: StatusNotQueued}
	}
	if l.held && l.holder == c.Session {
		// The grant won the race with the end of the wait: report it, never lose it.
		return Result{Token: l.token, Value: l.value}
	}
	i := indexOfWaiter(l.waiters, c.Session)
	if i < 0 {
		return Result{Status: StatusNotQueued}
	}
	l = a.st.own(l)
	l.waiters = a.removeWaiter(l.waiters, c.Session)
	delete(ss.waits, c.Lock)
	a.changed(c.Lock, l)
	return Result{Status: StatusCancelled}
}

func (a *applier) delayEnded(c *Command) Result {
	l := a.st.locks[c.Lock]
	if l == nil || l.delay == nil {
		return Result{}
	}
	if c.Now < l.delay.until {
		return Result{Status: StatusLockDelayed, DelayUntil: l.delay.until}
	}
	l = a.st.own(l)
	l.delay = nil
	a.grantNext(c.Lock, l)
	a.changed(c.Lock, l)
	return Result{}
}

// grant makes ss the holder of l with this command's index as token.
func (a *applier) grant(name string, l *lock, ss *session, value string) {
	l.held, l.holder, l.token, l.value = true, ss.id, a.index, value
	a.st.held++
	ss.link(l)
	a.emit(Event{Kind: EventGranted, Lock: name, Session: ss.id, Token: a.index})
}

// grantNext hands a free, undelayed lock to the first waiter whose session is alive.
func (a *applier) grantNext(name string, l *lock) {
	for !l.held && l.delay == nil && len(l.waiters) > 0 {
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
		a.grant(name, l, ss, w.value)
	}
}

func (a *applier) clearHolder(ss *session, name string, l *lock) {
	a.emit(Event{Kind: EventReleased, Lock: name, Session: ss.id, Token: l.token})
	ss.unlink(l)
	l.held, l.holder, l.token, l.value = false, SessionID{}, 0, ""
	a.st.held--
}

// changed records that l's visible state changed at this index, and removes it if it is idle.
func (a *applier) changed(name string, l *lock) {
	a.touch(name, l)
	a.dropIfIdle(l)
}

// touch records that l's visible state changed at this index.
func (a *applier) touch(name string, l *lock) {
	l.modifyIndex = a.index
	a.emit(Event{Kind: EventLockChanged, Lock: name})
}

func (a *applier) dropIfIdle(l *lock) {
	if !l.held && l.delay == nil && len(l.waiters) == 0 {
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
