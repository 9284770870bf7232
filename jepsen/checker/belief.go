package checker

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// seen is server evidence about a lock: at some instant in [from, to], holder held it under
// token, or nobody held it (holder "").
type seen struct {
	holder   string
	token    uint64
	from, to int64
	op       history.Op
}

// serverSighting returns what a server answer shows about its lock: the holder an op shows
// (holderSeen), a refusal the Go client relayed (naming the holder), or a read that found the
// lock free. Unknown outcomes show nothing.
func serverSighting(op history.Op) (seen, bool) {
	if s, t, ok := holderSeen(op); ok {
		return seen{holder: s, token: t, from: op.Invoke, to: op.Complete, op: op}, true
	}
	switch {
	case op.Kind == history.ClientAcquire && op.Type == history.Fail && op.Code == api.CodeLockHeld && op.OutSession != "":
		return seen{holder: op.OutSession, token: op.OutToken, from: op.Invoke, to: op.Complete, op: op}, true
	case op.Kind == history.Read && op.Type == history.OK && !op.Held,
		op.Kind == history.Observe && op.Type == history.OK && !op.Held: // a vacancy an observer was told of
		return seen{from: op.Invoke, to: op.Complete, op: op}, true
	}
	return seen{}, false
}

// grantBy is a grant of token known to have happened by the time at: a server answer showing
// it, or a Go-client worker's own grant (a call that returned it, or a belief that began).
type grantBy struct {
	token uint64
	at    int64
	op    history.Op
}

// CheckBelief judges what the Go-client workers believed (history.Believe): from the moment
// Lock, TryLock or Campaign returned until the hold's context was done or Unlock or Resign
// began, a worker believes it holds the lock under the token it was given. All workers run in
// the harness process, so the beliefs share one monotonic clock.
//
//   - No two beliefs on the same lock overlap.
//   - No server answer shows the lock held by another session (or under another token), or
//     free, at an instant inside a belief: an op whose whole interval lies inside the belief.
//   - A belief under token t ends before any grant of a higher token is known to have happened:
//     an answer showing it, a Go-client call that returned it, or a belief under it that
//     began. Tokens only grow, so that grant came after the hold under t had ended.
//   - Each leader Observe reported has a token no lower than the one before it.
//   - A Go-client worker writes (to a resource that checks tokens or not) only inside a belief
//     under the token it writes with.
//
// A restore (FaultRestore) ends every session at once and holds back each lock that was held
// under a lock-delay instead of a holder, which a read shows as free: an answer showing the lock
// free inside a belief that began before a restore ended, and given after that restore began,
// is not a violation, but the belief must then end within a TTL of the restore's end (plus
// ClockRateError and ExpiryBound): its session is gone, so its renewals fail. The other rules
// (no overlap, no higher grant, nobody else seen holding) judge such beliefs as any other.
//
// Unknown outcomes show nothing, so they are not evidence. The figures give the closest call:
// the smallest gap between one session's belief ending and another's beginning on a lock.
func CheckBelief(ops []history.Op, cfg Config) Result {
	res := newResult("belief")
	beliefs := map[string][]history.Op{}
	sightings := map[string][]seen{}
	grants := map[string][]grantBy{}
	sessions := map[string]bool{}
	byAPI := map[string]int{}
	lost, observations := 0, 0
	for _, op := range ops {
		if op.Lock == "" {
			continue
		}
		switch {
		case op.Kind == history.Believe:
			beliefs[op.Lock] = append(beliefs[op.Lock], op)
			sessions[op.Session] = true
			byAPI[op.API]++
			if strings.HasPrefix(op.Detail, "context done") {
				lost++
			}
			grants[op.Lock] = append(grants[op.Lock], grantBy{op.OutToken, op.Invoke, op})
		case op.Kind == history.ClientAcquire && op.Type == history.OK:
			grants[op.Lock] = append(grants[op.Lock], grantBy{op.OutToken, op.Complete, op})
		case op.Kind == history.Observe:
			observations++
		}
		if s, ok := serverSighting(op); ok {
			sightings[op.Lock] = append(sightings[op.Lock], s)
			if s.holder != "" {
				grants[op.Lock] = append(grants[op.Lock], grantBy{s.token, s.to, op})
			}
		}
	}
	b := beliefCheck{res: &res, closest: math.MaxInt64, handover: math.MaxInt64, restores: restoreWindows(ops), cfg: cfg}
	for _, lock := range sortedKeys(beliefs) {
		l := beliefs[lock]
		sort.Slice(l, func(i, j int) bool { return l[i].Invoke < l[j].Invoke })
		b.overlaps(lock, l)
		b.against(lock, l, sightings[lock], grants[lock])
	}
	b.observers(ops)
	inside, unchecked := b.writes(ops, beliefs, sessions)
	n := 0
	for _, l := range beliefs {
		n += len(l)
	}
	if n == 0 && observations == 0 && len(clientSessions(ops)) == 0 {
		res.Figures = "no client workers"
		return res
	}
	res.Figures = fmt.Sprintf("%d beliefs (lock/trylock/campaign %d/%d/%d) of %d client sessions on %d locks, %d ended by a lost hold; closest call %s; %s; %d server answers inside beliefs (%d showing it free after a restore), %d observed leaders, %d client writes inside beliefs (%d unchecked)",
		n, byAPI["lock"], byAPI["trylock"], byAPI["campaign"], len(sessions), len(beliefs), lost, b.closestCall(),
		b.handoverFigure(), b.checked, b.excused, observations, inside, unchecked)
	return res
}

// beliefCheck carries CheckBelief's findings.
type beliefCheck struct {
	res *Result
	// closest is the smallest gap between a belief's end and another session's next belief's
	// start on a lock, with the two beliefs.
	closest     int64
	closestPair [2]history.Op
	// handover is the smallest gap between a belief ended by a lost hold and the earliest
	// evidence that a higher token had been granted.
	handover     int64
	handoverPair [2]history.Op
	checked      int
	// restores are the restore requests (PUT /v1/snapshot) of the run, each from its invocation
	// to its completion; cfg bounds how long a belief may outlive one.
	restores []history.Interval
	cfg      Config
	excused  int
}

// restoreWindows returns the intervals of the restore requests in ops.
func restoreWindows(ops []history.Op) []history.Interval {
	var out []history.Interval
	for _, op := range ops {
		if op.Kind == history.Nemesis && op.Fault == FaultRestore && op.Action == history.ActionStop {
			out = append(out, history.Interval{Start: op.Invoke, End: op.Complete})
		}
	}
	return out
}

// freedByRestore returns the restore that may have taken the hold of bel away before the
// sighting s showed the lock free: one that began before s ended and ended after bel began.
func (b *beliefCheck) freedByRestore(bel history.Op, s seen) (history.Interval, bool) {
	for _, w := range b.restores {
		if w.Start <= s.to && bel.Invoke <= w.End {
			return w, true
		}
	}
	return history.Interval{}, false
}

func (b *beliefCheck) closestCall() string {
	if b.closest == math.MaxInt64 {
		return "n/a (no lock passed between beliefs of two sessions)"
	}
	p, n := b.closestPair[0], b.closestPair[1]
	return fmt.Sprintf("%s (%s: %s believed until %s, %s from %s)", time.Duration(b.closest).Round(time.Microsecond),
		p.Lock, shortID(p.Session), secs(p.Complete), shortID(n.Session), secs(n.Invoke))
}

func (b *beliefCheck) handoverFigure() string {
	if b.handover == math.MaxInt64 {
		return "no lost hold seen handed on"
	}
	p, g := b.handoverPair[0], b.handoverPair[1]
	return fmt.Sprintf("a lost hold handed on %s after its belief ended, at the closest (%s: %s believed token %d until %s, token %d granted by %s)",
		time.Duration(b.handover).Round(time.Millisecond), p.Lock, shortID(p.Session), p.OutToken, secs(p.Complete), g.OutToken, secs(g.Complete))
}

// overlaps flags beliefs of one lock (ordered by start) that overlap, and finds the closest
// call between beliefs of different sessions.
func (b *beliefCheck) overlaps(lock string, l []history.Op) {
	last := map[string]history.Op{} // session -> its belief that ended last so far
	for _, cur := range l {
		for _, s := range sortedKeys(last) {
			prev := last[s]
			if prev.Complete > cur.Invoke {
				b.res.violate("lock %q: two workers believed they held it at once, %s to %s:\n%s\n%s",
					lock, secs(cur.Invoke), secs(min(prev.Complete, cur.Complete)), prev, cur)
				continue
			}
			if s != cur.Session && cur.Invoke-prev.Complete < b.closest {
				b.closest, b.closestPair = cur.Invoke-prev.Complete, [2]history.Op{prev, cur}
			}
		}
		if p, ok := last[cur.Session]; !ok || cur.Complete > p.Complete {
			last[cur.Session] = cur
		}
	}
}

// against judges the beliefs of one lock against the server's answers and the grants known.
func (b *beliefCheck) against(lock string, l []history.Op, sightings []seen, grants []grantBy) {
	sort.Slice(sightings, func(i, j int) bool { return sightings[i].from < sightings[j].from })
	// By completion, with the highest token granted so far, to find a belief that outlived a
	// later grant.
	sort.Slice(grants, func(i, j int) bool { return grants[i].at < grants[j].at })
	best := make([]int, len(grants)) // index of the highest token among grants[:i+1]
	for i := range grants {
		best[i] = i
		if i > 0 && grants[best[i-1]].token >= grants[i].token {
			best[i] = best[i-1]
		}
	}
	// By token, with the earliest time among higher tokens, for the closest handover.
	byToken := append([]grantBy(nil), grants...)
	sort.Slice(byToken, func(i, j int) bool { return byToken[i].token < byToken[j].token })
	earliest := make([]int, len(byToken)) // index of the earliest among byToken[i:]
	for i := len(byToken) - 1; i >= 0; i-- {
		earliest[i] = i
		if i+1 < len(byToken) && byToken[earliest[i+1]].at <= byToken[i].at {
			earliest[i] = earliest[i+1]
		}
	}
	for _, bel := range l {
		// A server answer entirely inside the belief that shows someone else, or nobody.
		k := sort.Search(len(sightings), func(i int) bool { return sightings[i].from >= bel.Invoke })
		for ; k < len(sightings) && sightings[k].from <= bel.Complete; k++ {
			s := sightings[k]
			if s.to > bel.Complete {
				continue
			}
			b.checked++
			switch {
			case s.holder == "":
				if w, ok := b.freedByRestore(bel, s); ok {
					b.excused++
					limit := w.End + int64(float64(b.cfg.TTL)*(1+b.cfg.ClockRateError)) + int64(b.cfg.ExpiryBound)
					if bel.Complete > limit {
						b.res.violate("lock %q: %s believed it held token %d until %s, more than a TTL after the restore that ended its session (%s to %s):\n%s\n%s",
							lock, shortID(bel.Session), bel.OutToken, secs(bel.Complete), secs(w.Start), secs(w.End), bel, s.op)
					}
					continue
				}
				b.res.violate("lock %q: %s believed it held token %d from %s to %s, but the lock was free in between:\n%s\n%s",
					lock, shortID(bel.Session), bel.OutToken, secs(bel.Invoke), secs(bel.Complete), bel, s.op)
			case s.holder != bel.Session || s.token != bel.OutToken && bel.OutToken != 0:
				b.res.violate("lock %q: %s believed it held token %d from %s to %s, but %s held it under token %d in between:\n%s\n%s",
					lock, shortID(bel.Session), bel.OutToken, secs(bel.Invoke), secs(bel.Complete), shortID(s.holder), s.token, bel, s.op)
			}
		}
		// A higher token granted before the belief ended. Token 0 is a hold the client had
		// already forgotten when the worker asked for its token (the session was lost right
		// after the call returned): its token is unknown, so only the other rules judge it.
		i := sort.Search(len(grants), func(i int) bool { return grants[i].at >= bel.Complete }) - 1
		if i >= 0 && bel.OutToken != 0 && grants[best[i]].token > bel.OutToken {
			g := grants[best[i]]
			b.res.violate("lock %q: %s believed it held token %d until %s, but token %d had been granted by %s:\n%s\n%s",
				lock, shortID(bel.Session), bel.OutToken, secs(bel.Complete), g.token, secs(g.at), bel, g.op)
		}
		if !strings.HasPrefix(bel.Detail, "context done") || bel.OutToken == 0 {
			continue
		}
		j := sort.Search(len(byToken), func(i int) bool { return byToken[i].token > bel.OutToken })
		if j < len(byToken) {
			g := byToken[earliest[j]]
			if gap := g.at - bel.Complete; gap >= 0 && gap < b.handover {
				op := g.op
				op.OutToken = g.token
				op.Complete = g.at
				b.handover, b.handoverPair = gap, [2]history.Op{bel, op}
			}
		}
	}
}

// observers flags a leader reported by Observe under a lower token than the one before it.
func (b *beliefCheck) observers(ops []history.Op) {
	type key struct {
		process int
		lock    string
	}
	last := map[key]history.Op{}
	for _, op := range ops { // in completion order
		if op.Kind != history.Observe || op.Type != history.OK || !op.Held {
			continue // a vacancy has no token to compare
		}
		k := key{op.Process, op.Lock}
		if prev, ok := last[k]; ok && op.OutToken < prev.OutToken {
			b.res.violate("lock %q: an observer was told of token %d after token %d:\n%s\nafter\n%s",
				op.Lock, op.OutToken, prev.OutToken, op, prev)
		}
		last[k] = op
	}
}

// writes checks that each Go-client worker's write was decided inside a belief under its
// token, and counts them.
func (b *beliefCheck) writes(ops []history.Op, beliefs map[string][]history.Op, sessions map[string]bool) (inside, unchecked int) {
	for _, w := range ops {
		if w.Kind != history.Write || !sessions[w.Session] {
			continue
		}
		if w.Unchecked {
			unchecked++
		}
		l := beliefs[w.Lock]
		k := sort.Search(len(l), func(i int) bool { return l[i].Invoke > w.Invoke })
		found := false
		for i := k - 1; i >= 0 && !found; i-- {
			bel := l[i]
			found = bel.Session == w.Session && bel.OutToken == w.Token && bel.Complete >= w.Invoke
			if bel.Session == w.Session {
				break // a worker's beliefs on a lock do not overlap: the latest one decides
			}
		}
		if !found {
			b.res.violate("lock %q: a client worker wrote under token %d at %s without believing it held it:\n%s",
				w.Lock, w.Token, secs(w.Invoke), w)
			continue
		}
		inside++
	}
	return inside, unchecked
}
