package fsm

import "fmt"

// The invariants of a lock entry, stated once: Apply keeps them after every command (the
// randomized and model tests check it after each one, through CheckIntegrity), and Restore
// refuses a snapshot record that breaks one (readLock), since such a state could never have
// been applied and would make the rules misbehave:
//
//   - Limit and mode: a semaphore's limit is 2 to MaxLimit (a semaphore of one is a lock,
//     written as limit 0); a semaphore's grants and delays are at most its limit and never
//     shared; a lock's are one exclusive grant or delay, or any number of shared ones. That is,
//     each grant fitted beside the others (fits, acquire.go).
//   - Canonical form: a lock that is shared has a grant or a delay; its grants are stored one
//     way (lock.go); an extension that says nothing is dropped (lock.tidy).
//   - Tokens: every grant's token is the index of the command that granted it, so it is not 0,
//     is no later than the lock's modify index, and tokens grow along the list of grants.
//   - Delays: see delays.go.
//   - Entries: a lock entry is held, delayed or awaited; an idle one is removed.
//   - Queue: the first waiter of a lock (not a semaphore) that wants an exclusive grant never
//     fits, since the command that made room granted it; only a shared waiter or a semaphore's
//     may wait for a ServeQueue (applier.grantNext). A semaphore has no shared waiter.
//   - Sessions: a session holds or awaits a lock at most once, never both, and each grant and
//     waiter belongs to a live session (linkLock checks these on restore).

// checkLock returns which invariant of a lock entry (above) l breaks, or nil; linkLock checks
// those that concern sessions.
func checkLock(l *lock) error {
	var none lockExt
	x := l.x
	if x == nil {
		x = &none
	}
	gs := l.grants()
	n := len(gs) + len(x.delays)
	switch {
	case x.limit == 1 || x.limit > MaxLimit:
		return fmt.Errorf("has limit %d (a lock is written as 0)", x.limit)
	case x.limit > 0 && x.shared:
		return fmt.Errorf("a semaphore (limit %d) with shared grants or delays", x.limit)
	case n > 0 && !fitsBeside(x.limit, x.shared, n-1, x.shared):
		return fmt.Errorf("limit %d with %d grants and delays, shared %v", x.limit, n, x.shared)
	case x.shared && n == 0:
		return fmt.Errorf("shared without grants or delays")
	case l.x != nil && l.x.empty():
		return fmt.Errorf("an extension that says nothing")
	case l.inline && len(x.grants) > 0 || len(x.grants) == 1:
		return fmt.Errorf("%d grants in the extension, inline %v", len(x.grants), l.inline)
	case !l.inline && l.one[0] != (grant{}):
		return fmt.Errorf("an unused inline grant keeps %v", l.one[0].session)
	}
	for i := range gs {
		// A grant sets its token and the modify index to its index; tokens only grow.
		if t := gs[i].token; t == 0 || t > l.modifyIndex || i > 0 && t <= gs[i-1].token {
			return fmt.Errorf("token %d, modify index %d", t, l.modifyIndex)
		}
	}
	for i, dl := range x.delays {
		if dl.until == 0 || dl.index > l.modifyIndex || dl.index == 0 && len(x.delays) > 1 ||
			i > 0 && dl.index <= x.delays[i-1].index {
			return fmt.Errorf("delay %d until %d, index %d out of order or unnamed", i, dl.until, dl.index)
		}
	}
	switch {
	case n == 0 && len(l.waiters) == 0:
		// Apply removes an idle entry.
		return fmt.Errorf("neither held, delayed nor awaited")
	case len(l.waiters) > 0 && x.limit == 0 && !l.waiters[0].shared && l.fits(false):
		// A command that frees a lock grants it to the first waiter. (Only a shared waiter or
		// a semaphore's may wait for its ServeQueue: see applier.grantNext.)
		return fmt.Errorf("its first waiter could be granted")
	}
	for _, w := range l.waiters {
		if w.shared && x.limit > 0 {
			return fmt.Errorf("a semaphore with a shared waiter")
		}
	}
	return nil
}
