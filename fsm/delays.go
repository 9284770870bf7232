package fsm

import (
	"slices"
	"time"
)

// The lock-delay rule: when a session that holds locks expires (not when it is destroyed), and
// it has a lock-delay, each grant it held is replaced by a delay of the same mode that keeps
// the lock from being granted for that long, for resources that cannot check fencing tokens.
//
// A delay counts as a grant wherever fits counts room (acquire.go), so a delayed lock grants
// nothing its expired holder's grant would have kept out. It ends with a DelayEnded command
// that the leader proposes when the delay is over on its clock: under FeatureSemaphoresRWLocks
// one delay, named by the index of the expiry that started it (lockDelay.index); before it,
// every delay of the lock that is over by the command's clock reading, the lock having at most
// one. An acquire in an entry written before leaders left the clock out of acquires ends the
// delays that are over too (see Command.Now). Ending a delay grants the next waiters.
//
// Invariants (checked by checkLock, invariants.go): a delay's end is never 0, and its index,
// when it has one, is no later than the lock's modify index; delays are in the order they
// started, and an unnamed delay (index 0) is its lock's only one.

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

// earliestUntil returns the earliest end of the delays in force, or 0 for none (or nil x).
func (x *lockExt) earliestUntil() int64 {
	var until int64
	if x == nil {
		return 0
	}
	for _, d := range x.delays {
		if until == 0 || d.until < until {
			until = d.until
		}
	}
	return until
}

// anyDue reports whether a delay is over by the clock reading now.
func (x *lockExt) anyDue(now int64) bool {
	for _, d := range x.delays {
		if now >= d.until {
			return true
		}
	}
	return false
}

// endDue ends every delay that is over by the clock reading now; x must be owned.
func (x *lockExt) endDue(now int64) {
	x.delays = slices.DeleteFunc(x.delays, func(d lockDelay) bool { return now >= d.until })
	if len(x.delays) == 0 {
		x.delays = nil
	}
}

// delayIndex returns the position of the delay started at index, or -1.
func (x *lockExt) delayIndex(index uint64) int {
	for i, d := range x.delays {
		if d.index == index {
			return i
		}
	}
	return -1
}

// delayed reports whether a lock-delay is in force.
func (l *lock) delayed() bool { return l.x != nil && len(l.x.delays) > 0 }

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
