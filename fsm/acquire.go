package fsm

// The acquire rule: how a lock is granted, queued for, released and handed on.
//
// A lock is a plain mutex (limit 0, one exclusive grant), a semaphore (limit 2 to MaxLimit,
// that many grants at once) or a read/write lock (limit 0, one exclusive grant or any number
// of shared ones). The first acquire of a lock without an entry fixes its limit; an acquire
// naming another is refused StatusLimitMismatch while the entry exists.
//
// A grant fits (fits) while the lock's grants and lock-delays leave room for it in its mode.
// An acquire is granted at once only if nobody waits (the queue is first in, first out), its
// grant fits, and the command has not granted this lock already: a command grants a lock at
// most once, so that every grant's token, its command's index, is its own. Otherwise a try
// is refused (StatusLockHeld naming the newest grant, or StatusLockDelayed), and a blocking
// acquire joins the queue, or keeps its place there with the newest value (StatusQueued). A
// holder's acquire is its grant again, in the same mode only, and may store a new value.
//
// A release (with the grant's token) or a session's end removes a grant (ungrant); a command
// that makes room grants the first waiter (grantNext). When more waiters than that one fit, or
// the command granted the lock already, it reports the queue ready (EventQueueReady, ready),
// and the leader proposes a ServeQueue for each further grant. A cancel-wait takes a waiter
// out of the queue, unless its grant won the race, which it then reports.
//
// Grants are stored in lock.go, the attempts an acquire may name are checked in attempts.go,
// lock-delays are in delays.go, and the invariants all of this keeps are in invariants.go.

// MaxLimit is the highest limit a semaphore may have.
const MaxLimit = 1000

// fits reports whether a grant in the given mode can be made beside the lock's grants and
// delays (see fitsBeside).
func (l *lock) fits(shared bool) bool {
	x := l.x
	if x == nil {
		return !l.held()
	}
	return fitsBeside(x.limit, x.shared, len(x.delays)+l.holds(), shared)
}

// fitsBeside reports whether a grant in the given mode fits beside n grants and delays, shared
// or not, of a lock with the given limit: for a semaphore, while they leave a permit; for a
// lock, an exclusive grant when there are none, a shared one when all there are are shared.
func fitsBeside(limit uint32, heldShared bool, n int, shared bool) bool {
	if limit > 0 {
		return n < int(limit)
	}
	return n == 0 || shared && heldShared
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
	ss.link(l, l.addGrant(grant{session: ss.id, token: a.index, value: value, since: a.at}))
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
		g := l.grants()[i]
		if c.SetValue && c.Value != g.value {
			l = a.st.own(l)
			l.grants()[i].value = c.Value
			a.changed(c.Lock, l)
			g.value = c.Value
		}
		return Result{Token: g.token, Value: g.value}
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
		l.waiters = append(l.waiters, waiter{session: c.Session, value: c.Value, shared: c.Shared, since: a.at})
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
	if !l.held() {
		return Result{Status: StatusLockDelayed, DelayUntil: l.x.earliestUntil()}
	}
	g := l.newest()
	return Result{Status: StatusLockHeld, Holder: g.session, Token: g.token}
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
	if l.grants()[i].token != c.Token {
		return Result{Status: StatusNotHolder}
	}
	l = a.st.own(l)
	a.ungrant(ss, c.Lock, l, i)
	a.grantNext(c.Lock, l)
	a.changed(c.Lock, l)
	return Result{}
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
		g := &l.grants()[i]
		return Result{Token: g.token, Value: g.value}
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
