package fsm

// Apply's dispatch: each command type goes to the file of its rule (acquire.go for acquire,
// release, cancel-wait and serve-queue; delays.go for delay-ended; acl.go for the ACL commands;
// features.go for enable-features); what is left here is a session's life (created, destroyed
// or expired: its waits end first, then its grants, by the acquire rule) and the bookkeeping
// every rule shares (a lock's modify index, the removal of idle entries, the events). An
// operator's forced release (force-release) is here too: it ends the holding session.

import "time"

// applier applies one command at one index to the state and collects the events it causes.
// It changes a lock entry only through state.own, which keeps the entries a snapshot captured.
type applier struct {
	st    *state
	index uint64
	term  uint64 // of the log entry
	// at is the log entry's time (raft.Log.AppendedAt, Unix ns) when the cluster keeps grant
	// times (FeatureGrantTimes with FeatureSemaphoresRWLocks), else 0.
	at     int64
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
	if i := l.holdOf(c.Session); i < 0 || l.grants()[i].token != c.Token {
		return Result{Status: StatusNotHolder}
	}
	r := a.endSession(c.Session, false, ss.ttl+ss.lockDelay, c.Now)
	r.Holder = c.Session
	if l := a.st.locks[c.Lock]; l != nil {
		r.DelayUntil = l.x.earliestUntil()
	}
	return r
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
	if !l.held() && !l.delayed() && len(l.waiters) == 0 {
		a.st.removeLock(l)
		if l.modifyIndex != 0 {
			a.st.freedIndex = a.index
		}
	}
}
