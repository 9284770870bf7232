package checker

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// never is the end of a stretch that does not end in the history.
const never = math.MaxInt64

// clientLife is the part of a Go-client worker's session that the worker used: from its
// creation until the worker began closing it or found it lost (history.ClientSessionEnd).
type clientLife struct{ from, to int64 }

// heldSpan is what the server answers show of one grant (a session, a lock, a token): the lock
// was held under it at an instant no later than first.Complete and at an instant no earlier
// than last.Invoke, and, since a token is granted once, at every instant in between.
type heldSpan struct {
	first, last history.Op
}

// CheckHeldByNobody is a liveness check of the Go-client workers' sessions: no lock stays
// held, for longer than a TTL, by a session in which no worker holds or asks for it.
//
// A worker owns a lock in its session from the start of a call that takes it (Lock, TryLock,
// Campaign: history.ClientAcquire) until an Unlock of it returns nil (history.ClientRelease ok):
// then the release was acknowledged and the client has nothing of the session's attempts on
// the lock left to withdraw in the background. A call that failed, an Unlock that failed and
// every Resign leave the lock owned until the next acknowledged Unlock, whenever that comes,
// since the client may still be withdrawing in the background; a lost or closing session is
// not judged from the moment the worker saw it end, since the server may keep it, and its
// locks, until it expires. In between, the session cannot hold the lock: the client promises
// that no request of a call that ended can take it. A lock that server answers (reads, the
// sampled lock table, refusals naming the holder, observed leaders) show held by the session
// under one token at two instants more than a TTL apart, inside one such stretch, is held by
// nobody: others wait for it until the session ends. The figures give the longest such hold
// seen, however short, and the most settled Lock/Unlock cycles of one session.
func CheckHeldByNobody(ops []history.Op, cfg Config) Result {
	res := newResult("held-by-nobody")
	w := clientWork(ops)
	if len(w.lives) == 0 {
		res.Figures = "no client workers"
		return res
	}
	spans, sightings := heldSpans(ops, w.lives)
	stretches := map[sessionLock][]stretch{} // in time order, computed once per session and lock
	var longest time.Duration
	for _, k := range sortedGrants(spans) {
		sp := spans[k]
		from, to := sp.first.Complete, sp.last.Invoke
		sl := sessionLock{k.session, k.lock}
		sts, ok := stretches[sl]
		if !ok {
			sts = unowned(*w.lives[k.session], w.calls[sl])
			stretches[sl] = sts
		}
		for i := sort.Search(len(sts), func(i int) bool { return sts[i].to > from }); i < len(sts) && sts[i].from < to; i++ {
			st := sts[i]
			lo, hi := max(from, st.from), min(to, st.to)
			if hi <= lo {
				continue
			}
			d := time.Duration(hi - lo)
			longest = max(longest, d)
			if d > cfg.TTL {
				res.violate("lock %q: held by Go-client session %s under token %d from %s to %s (%s, over the TTL %s), while no worker of that session held or asked for it (%s):\n%s\n%s",
					k.lock, shortID(k.session), k.token, secs(lo), secs(hi), d.Round(time.Millisecond), cfg.TTL,
					st.why(), sp.first, sp.last)
				break
			}
		}
	}
	most, mostSession := 0, ""
	for _, s := range sortedKeys(w.cycles) {
		if w.cycles[s] > most {
			most, mostSession = w.cycles[s], s
		}
	}
	res.Figures = fmt.Sprintf("%d client sessions, at most %d settled Lock/Unlock cycles on one (%s); %d sightings of locks they held; longest hold by a session not holding or asking for the lock %s (bound: the TTL, %s)",
		len(w.lives), most, shortID(mostSession), sightings, longest.Round(time.Millisecond), cfg.TTL)
	return res
}

// sessionLock is a session's use of one lock.
type sessionLock struct{ session, lock string }

// grantKey is one grant: a lock to a session under a token.
type grantKey struct {
	session, lock string
	token         uint64
}

// workerCalls is what the Go-client workers did with their sessions.
type workerCalls struct {
	lives  map[string]*clientLife       // by session
	calls  map[sessionLock][]history.Op // calls that take or give back a lock
	cycles map[string]int               // acknowledged Unlocks, by session
}

// clientWork collects the Go-client workers' sessions and their calls on each lock.
func clientWork(ops []history.Op) workerCalls {
	w := workerCalls{lives: map[string]*clientLife{}, calls: map[sessionLock][]history.Op{}, cycles: map[string]int{}}
	for _, op := range ops {
		switch {
		case op.Kind == history.ClientSession && op.Type == history.OK && op.Session != "":
			w.lives[op.Session] = &clientLife{from: op.Invoke, to: never}
		case op.Kind == history.ClientAcquire || op.Kind == history.ClientRelease:
			k := sessionLock{op.Session, op.Lock}
			w.calls[k] = append(w.calls[k], op)
			if op.Kind == history.ClientRelease && op.Type == history.OK {
				w.cycles[op.Session]++
			}
		}
	}
	for _, op := range ops {
		if l := w.lives[op.Session]; op.Kind == history.ClientSessionEnd && l != nil {
			l.to = min(l.to, op.Invoke)
		}
	}
	return w
}

// heldSpans gathers the server answers showing a lock held by one of the sessions, by grant,
// and counts them.
func heldSpans(ops []history.Op, lives map[string]*clientLife) (map[grantKey]*heldSpan, int) {
	spans := map[grantKey]*heldSpan{}
	n := 0
	for _, op := range ops {
		s, ok := serverSighting(op)
		if !ok || s.holder == "" || lives[s.holder] == nil {
			continue
		}
		n++
		k := grantKey{s.holder, op.Lock, s.token}
		sp := spans[k]
		switch {
		case sp == nil:
			spans[k] = &heldSpan{first: op, last: op}
		case op.Complete < sp.first.Complete:
			sp.first = op
		}
		if sp != nil && op.Invoke > sp.last.Invoke {
			sp.last = op
		}
	}
	return spans, n
}

// sortedGrants returns the grants in a fixed order: by lock, session and token.
func sortedGrants(spans map[grantKey]*heldSpan) []grantKey {
	keys := make([]grantKey, 0, len(spans))
	for k := range spans {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.lock != b.lock {
			return a.lock < b.lock
		}
		if a.session != b.session {
			return a.session < b.session
		}
		return a.token < b.token
	})
	return keys
}

// stretch is an interval of a session in which its worker did not own a lock: after the call
// that settled it (or the session's start) and before the next call (or the session's end).
type stretch struct {
	from, to      int64
	settled, next *history.Op // the call that settled the lock before, the call after; nil if none
}

// why says what bounds the stretch, for a violation's message.
func (s stretch) why() string {
	before := "it had not asked for the lock yet"
	if s.settled != nil {
		before = fmt.Sprintf("its Unlock of token %d was acknowledged at %s", s.settled.Token, secs(s.settled.Complete))
	}
	after := "and asked for it no more"
	switch {
	case s.next != nil && s.next.Invoke == s.to && s.settled == nil:
		after = "and asked for it first at " + secs(s.next.Invoke)
	case s.next != nil && s.next.Invoke == s.to:
		after = "and asked for it again only at " + secs(s.next.Invoke)
	case s.to != never:
		after = "and its worker stopped using the session at " + secs(s.to)
	}
	return before + ", " + after
}

// unowned returns the stretches of the session's life in which its worker did not own the lock,
// given the worker's calls on it: owned from a call that takes it until an acknowledged Unlock.
func unowned(life clientLife, calls []history.Op) []stretch {
	sort.Slice(calls, func(i, j int) bool { return calls[i].Invoke < calls[j].Invoke })
	var out []stretch
	cur := stretch{from: life.from}
	open := true // cur is a stretch in progress
	for i := range calls {
		c := &calls[i]
		if open {
			cur.to, cur.next = min(c.Invoke, life.to), c
			out = append(out, cur)
			open = false
		}
		if c.Kind == history.ClientRelease && c.Type == history.OK {
			cur = stretch{from: c.Complete, settled: c}
			open = true
		}
	}
	if open {
		cur.to = life.to
		out = append(out, cur)
	}
	kept := out[:0]
	for _, s := range out {
		if s.from < s.to && s.from < life.to {
			kept = append(kept, s)
		}
	}
	return kept
}
