package fsm

import (
	"maps"
	"slices"
	"strconv"
)

// The attempt rule: a request of an acquire the client gave up must never queue or grant.
//
// An acquire, release or cancel-wait may name the attempt it belongs to: a string
// (Command.Attempt) or, under FeatureAttemptNumbers, a number with a floor
// (Command.AttemptSeq, Command.AttemptFloor). A release or cancel-wait ends the attempts it
// names (endAttempt): its string attempt, which the session remembers among its last
// maxFences cancelled ones (session.fences); its numbered attempt and every lower one of that
// lock (session.ended); and, through its floor, every attempt below the floor whatever lock
// it names (session.attemptFloor). An acquire whose attempt had ended (attemptHadEnded) is
// refused StatusAttemptCancelled, whatever the lock's state.
//
// Under FeatureAttemptEnds (with FeatureAttemptNumbers) an attempt ends exactly when the
// state machine decides it (exactAttempts): an acquire refused for good ends its numbered
// attempt in the same command (refused), a cancel-wait of an attempt that had already ended
// changes nothing, and a string attempt "~N" is the numbered attempt N (NumberedAttempt).
//
// Invariants: a numbered attempt that ended is never forgotten (ended keeps, per lock, only
// what is above the floor, and the floor only rises); a session remembers at most maxFences
// string attempts; the fences and ended of a session a snapshot may be reading are changed
// only in a copy made by state.ownSession. The feature fields a command may carry are gated in
// features.go.

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
