package checker

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// sighting is the earliest evidence that a session held a lock under a token.
type sighting struct {
	session string
	token   uint64
	seen    int64 // earliest completion of an op showing the grant: the grant happened before
	op      history.Op
}

// sessionTimes indexes, per session, the times that bound its expiry.
type sessionTimes struct {
	ttl      map[string]time.Duration
	delay    map[string]time.Duration // lock-delays of the sessions that have one
	alive    map[string][]int64       // invocations of ok creates and renewals: expiry >= each + TTL
	attempts map[string][]int64       // completions of create/renew attempts that may have reached the leader
	releases map[string][]history.Op
	defTTL   time.Duration
}

func indexSessions(ops []history.Op, cfg Config) sessionTimes {
	st := sessionTimes{
		ttl:      map[string]time.Duration{},
		delay:    map[string]time.Duration{},
		alive:    map[string][]int64{},
		attempts: map[string][]int64{},
		releases: map[string][]history.Op{},
	}
	for _, op := range ops {
		if op.Session == "" {
			continue
		}
		switch op.Kind {
		case history.CreateSession, history.Renew:
			if op.Kind == history.CreateSession && op.Type == history.OK {
				st.ttl[op.Session] = op.TTL()
				if d := op.LockDelay(); d > 0 {
					st.delay[op.Session] = d
				}
			}
			if op.Type == history.OK {
				st.alive[op.Session] = append(st.alive[op.Session], op.Invoke)
			}
			if op.Type != history.Fail {
				st.attempts[op.Session] = append(st.attempts[op.Session], op.Complete)
			}
		case history.Release, history.Destroy:
			if op.Type != history.Fail || op.Code == api.CodeTimeout {
				st.releases[op.Session] = append(st.releases[op.Session], op)
			}
		}
	}
	for s, ts := range st.alive {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		st.alive[s] = ts
	}
	for s, ts := range st.attempts {
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		st.attempts[s] = ts
	}
	st.defTTL = cfg.TTL
	return st
}

// ttlOf is the TTL a session was created with.
func (st sessionTimes) ttlOf(s string) time.Duration {
	if t := st.ttl[s]; t > 0 {
		return t
	}
	return st.defTTL
}

// lastBefore returns the largest time in sorted ts that is < limit.
func lastBefore(ts []int64, limit int64) (int64, bool) {
	k := sort.Search(len(ts), func(i int) bool { return ts[i] >= limit })
	if k == 0 {
		return 0, false
	}
	return ts[k-1], true
}

// releasedBefore reports whether the session tried to release (lock, token), or to destroy
// itself, in an op invoked before t.
func (st sessionTimes) releasedBefore(session, lock string, token uint64, t int64) bool {
	for _, op := range st.releases[session] {
		if op.Invoke >= t {
			continue
		}
		if op.Kind == history.Destroy || (op.Lock == lock && op.Token == token) {
			return true
		}
	}
	return false
}

// sightings returns, per lock, the grants seen, one per token, ordered by token.
func sightings(ops []history.Op) map[string][]sighting {
	byTok := map[string]map[uint64]sighting{}
	for _, op := range ops {
		s, t, ok := holderSeen(op)
		if !ok || t == 0 {
			continue
		}
		if byTok[op.Lock] == nil {
			byTok[op.Lock] = map[uint64]sighting{}
		}
		if prev, ok := byTok[op.Lock][t]; !ok || op.Complete < prev.seen {
			byTok[op.Lock][t] = sighting{session: s, token: t, seen: op.Complete, op: op}
		}
	}
	out := map[string][]sighting{}
	for lock, m := range byTok {
		for _, s := range m {
			out[lock] = append(out[lock], s)
		}
		l := out[lock]
		sort.Slice(l, func(i, j int) bool { return l[i].token < l[j].token })
	}
	return out
}

// nearFault reports whether [from, to] meets a cluster fault or the recovery after it.
func nearFault(faults []history.Interval, from, to int64, recovery time.Duration) bool {
	for _, f := range faults {
		if clusterFault(f.Fault) && f.Start <= to && from <= f.End+int64(recovery) {
			return true
		}
	}
	return false
}

// CheckExpiry checks the timing of expiries and lock-delays.
//
// Early: when a lock passes from s1 to another session without s1 trying to release it or
// destroy itself, s1 expired before the new grant was seen. Every acknowledged renewal (or the
// create) of s1 invoked at r reached the leader after r, so s1 may expire no earlier than
// r + TTL·(1 − ClockRateError), and the lock go to another no earlier than that plus s1's
// lock-delay·(1 − ClockRateError). This holds under every fault, and whatever the servers' wall
// clocks say: a leader change only extends.
//
// Late: away from cluster faults, a holder that stopped renewing loses its lock by its last
// renewal attempt + TTL·(1 + ClockRateError) + ExpiryBound: no op may see it holding later, and
// a session already waiting for the lock when the holder's TTL ran out, with no other grant
// seen in between, is granted it by then, plus the holder's lock-delay·(1 + ClockRateError).
func CheckExpiry(ops []history.Op, cfg Config) Result {
	res := newResult("expiry")
	e := expiryCheck{res: &res, cfg: cfg, st: indexSessions(ops, cfg), faults: history.Faults(ops),
		minMargin: time.Duration(math.MaxInt64)}
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Type == history.Info {
			e.lostAcquires = append(e.lostAcquires, op)
		}
	}
	e.lostAcquires = append(e.lostAcquires, clientHolds(ops, cfg)...)
	seen := sightings(ops)
	for _, lock := range sortedKeys(seen) {
		l := seen[lock]
		for i := 1; i < len(l); i++ {
			e.handoff(lock, l[i-1], l[i])
		}
	}
	for _, op := range ops {
		e.sighting(op)
	}
	margin := "n/a"
	if e.handoffs > 0 {
		margin = e.minMargin.Round(time.Millisecond).String()
	}
	res.Figures = fmt.Sprintf("%d handoffs by expiry, %d of them after a lock-delay (closest %s after TTL and lock-delay; rate error %.0f%%), %d waiters timed, %d sightings of holders checked against TTL+%s, %d near faults skipped",
		e.handoffs, e.delayed, margin, cfg.ClockRateError*100, e.waiters, e.sightings, cfg.ExpiryBound, e.skipped)
	return res
}

// expiryCheck carries CheckExpiry's indexes and counters.
type expiryCheck struct {
	res          *Result
	cfg          Config
	st           sessionTimes
	faults       []history.Interval
	lostAcquires []history.Op

	handoffs, delayed, waiters, sightings, skipped int
	minMargin                                      time.Duration
}

// clientHolds are the Go-client calls that may have taken a lock, each stretched to when the
// hold may have ended: the client's requests are not recorded, so its session may hold the lock
// from the call on, unseen, until it is given back after the belief ends, or until the session
// expires once the client stopped renewing it (a TTL and its lock-delay after the belief, or
// after a call that failed).
func clientHolds(ops []history.Op, cfg Config) []history.Op {
	type key struct {
		session, lock string
		token         uint64
	}
	believed := map[key]int64{}
	delay := map[string]time.Duration{}
	for _, op := range ops {
		switch op.Kind {
		case history.Believe:
			k := key{op.Session, op.Lock, op.OutToken}
			believed[k] = max(believed[k], op.Complete)
		case history.ClientSession:
			delay[op.Session] = op.LockDelay()
		}
	}
	var out []history.Op
	for _, op := range ops {
		if op.Kind != history.ClientAcquire || op.Type == history.Fail {
			continue
		}
		end := op.Complete
		if op.Type == history.OK {
			end = max(end, believed[key{op.Session, op.Lock, op.OutToken}])
		}
		op.Complete = end + int64(float64(cfg.TTL+delay[op.Session])*(1+cfg.ClockRateError)+float64(cfg.ExpiryBound))
		out = append(out, op)
	}
	return out
}

// deadline is when a session whose last renewal attempt completed at last must have lost its locks.
func (e *expiryCheck) deadline(s string, last int64) int64 {
	return last + int64(float64(e.st.ttlOf(s))*(1+e.cfg.ClockRateError)) + int64(e.cfg.ExpiryBound)
}

// handoff judges the passage of a lock from prev to next, when prev did not release it.
func (e *expiryCheck) handoff(lock string, prev, next sighting) {
	if prev.session == next.session || e.st.releasedBefore(prev.session, lock, prev.token, next.seen) {
		return
	}
	r, ok := lastBefore(e.st.alive[prev.session], next.seen)
	if !ok {
		return
	}
	e.handoffs++
	ttl, delay := e.st.ttlOf(prev.session), e.st.delay[prev.session]
	if delay > 0 {
		e.delayed++
	}
	earliest := r + int64(float64(ttl+delay)*(1-e.cfg.ClockRateError))
	if m := time.Duration(next.seen - (r + int64(ttl+delay))); m < e.minMargin {
		e.minMargin = m
	}
	if next.seen < earliest {
		e.res.violate("lock %q: session %s (token %d, TTL %s, lock-delay %s) renewed at %s, yet token %d went to %s by %s, %s before its TTL and lock-delay ran out:\n%s",
			lock, shortID(prev.session), prev.token, ttl, delay, secs(r), next.token, shortID(next.session),
			secs(next.seen), time.Duration(earliest-next.seen), next.op)
	}
	w := next.op
	last, ok := lastBefore(e.st.attempts[prev.session], next.seen)
	if !ok || w.Kind != history.Acquire || w.Type != history.OK || w.WaitNS == 0 || w.Invoke > last+int64(ttl) {
		return
	}
	for _, a := range e.lostAcquires {
		if a.Lock == lock && a.Session != prev.session && a.Invoke < next.seen && a.Complete > prev.seen {
			return // an unanswered acquire may have been granted in between, unseen
		}
	}
	if nearFault(e.faults, last, next.seen, e.cfg.Recovery) {
		e.skipped++
		return
	}
	e.waiters++
	if d := e.deadline(prev.session, last) + int64(float64(delay)*(1+e.cfg.ClockRateError)); next.seen > d {
		e.res.violate("lock %q: holder %s stopped renewing by %s (TTL %s, lock-delay %s); waiter %s got token %d only at %s, %s past TTL+lock-delay+%s:\n%s",
			lock, shortID(prev.session), secs(last), ttl, delay, shortID(next.session), next.token, secs(next.seen),
			time.Duration(next.seen-d), e.cfg.ExpiryBound, w)
	}
}

// sighting flags an op that still sees a holder whose session stopped renewing long before.
func (e *expiryCheck) sighting(op history.Op) {
	s, t, ok := holderSeen(op)
	if !ok || op.Kind == history.Acquire && op.Type == history.OK {
		return
	}
	// The server answers a waiting acquire with lock_held only once the wait elapsed.
	at := op.Invoke
	if op.Kind == history.Acquire && op.WaitNS > 0 {
		at += int64(float64(op.WaitNS) * (1 - e.cfg.ClockRateError))
	}
	attempts := e.st.attempts[s]
	last, ok := lastBefore(attempts, at)
	if !ok || e.st.releasedBefore(s, op.Lock, t, at) {
		return
	}
	if k := sort.Search(len(attempts), func(i int) bool { return attempts[i] >= at }); k < len(attempts) {
		return // the session went on renewing: it was alive
	}
	if nearFault(e.faults, last, at, e.cfg.Recovery) {
		e.skipped++
		return
	}
	e.sightings++
	if d := e.deadline(s, last); at > d {
		e.res.violate("lock %q: session %s last tried to renew by %s (TTL %s) but still held token %d at %s, %s past TTL+%s:\n%s",
			op.Lock, shortID(s), secs(last), e.st.ttlOf(s), t, secs(at), time.Duration(at-d), e.cfg.ExpiryBound, op)
	}
}
