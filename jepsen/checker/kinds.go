package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// kindOps are the ops of the semaphore or read/write-lock workers of one lock.
type kindOps struct {
	holds    []history.Op // what the workers believed (history.Hold)
	accesses []history.Op // the resource's accesses (history.HoldAccess), in its order
	waits    []history.Op // the calls that took holds (history.HoldWait)
}

// collectKinds gathers the ops of holds whose API passes want, by lock.
func collectKinds(ops []history.Op, want func(api string) bool) map[string]*kindOps {
	out := map[string]*kindOps{}
	get := func(lock string) *kindOps {
		if out[lock] == nil {
			out[lock] = &kindOps{}
		}
		return out[lock]
	}
	for _, op := range ops {
		if !want(op.API) {
			continue
		}
		switch op.Kind {
		case history.Hold:
			get(op.Lock).holds = append(get(op.Lock).holds, op)
		case history.HoldAccess:
			get(op.Lock).accesses = append(get(op.Lock).accesses, op)
		case history.HoldWait:
			get(op.Lock).waits = append(get(op.Lock).waits, op)
		}
	}
	for _, k := range out {
		sort.Slice(k.accesses, func(i, j int) bool { return k.accesses[i].ID < k.accesses[j].ID })
	}
	return out
}

// mostBelieved returns the most beliefs that overlap at one instant (a belief holds from its
// Invoke up to, not including, its Complete), and those beliefs.
func mostBelieved(holds []history.Op) []history.Op {
	var most []history.Op
	for _, h := range holds {
		var at []history.Op
		for _, o := range holds {
			if o.Invoke <= h.Invoke && h.Invoke < o.Complete {
				at = append(at, o)
			}
		}
		if len(at) > len(most) {
			most = at
		}
	}
	return most
}

// distinctTokens flags two beliefs under one token: every grant has a token of its own.
func distinctTokens(res *Result, lock string, holds []history.Op) {
	byToken := map[uint64]history.Op{}
	for _, h := range holds {
		if prev, dup := byToken[h.OutToken]; dup {
			res.violate("lock %q: token %d believed twice:\n    %s\n    %s", lock, h.OutToken, prev, h)
		}
		byToken[h.OutToken] = h
	}
}

// span is the stretch of the resource's order in which it accepted one token's accesses.
type span struct {
	token      uint64
	exclusive  bool
	first, end history.Op
}

// acceptedSpans returns the span of each token the resource accepted, in the order of their
// first access, and flags an accepted token that no worker was granted.
func acceptedSpans(res *Result, lock string, k *kindOps) []*span {
	granted := map[uint64]bool{}
	for _, w := range k.waits {
		if w.Type == history.OK {
			granted[w.OutToken] = true
		}
	}
	for _, h := range k.holds {
		granted[h.OutToken] = true
	}
	byToken := map[uint64]*span{}
	var out []*span
	for _, a := range k.accesses {
		if a.Type != history.OK {
			continue
		}
		if !granted[a.Token] {
			res.violate("lock %q: the resource accepted token %d, which no worker was granted: %s", lock, a.Token, a)
		}
		s := byToken[a.Token]
		if s == nil {
			s = &span{token: a.Token, first: a}
			byToken[a.Token] = s
			out = append(out, s)
		}
		s.end = a
		s.exclusive = s.exclusive || a.API == history.APIExclusive
	}
	return out
}

func (s *span) overlaps(o *span) bool { return s.first.ID <= o.end.ID && o.first.ID <= s.end.ID }

// kindFigures counts what a kinds checker saw.
type kindFigures struct {
	holds, accepted, staleRefused, staleAccepted, paused int
}

func (f *kindFigures) add(k *kindOps) {
	f.holds += len(k.holds)
	for _, h := range k.holds {
		if containsPause(h.Detail) {
			f.paused++
		}
	}
	for _, a := range k.accesses {
		switch {
		case a.Type == history.OK && a.Detail == "stale":
			f.staleAccepted++
			f.accepted++
		case a.Type == history.OK:
			f.accepted++
		case a.Detail == "stale":
			f.staleRefused++
		}
	}
}

func containsPause(detail string) bool { return strings.Contains(detail, "; paused") }

// CheckSemaphores judges the semaphore workers' holds (API permit): on each semaphore, at no
// instant did more than its limit of workers believe they held a permit; no two beliefs had
// one token; and, in the resource's order, the spans in which it accepted each token's writes
// (from the first to the last) never overlapped more than the limit of them, it never accepted
// a token after it had accepted limit higher ones (as a lock's resource never accepts one
// after a higher one: limit + 1 writers at once, the oldest of which has lost its permit),
// and every token it accepted was granted to a worker.
func CheckSemaphores(ops []history.Op, _ Config) Result {
	res := newResult("semaphore")
	var f kindFigures
	mostBelief, mostWriters, limit := 0, 0, 0
	locks := collectKinds(ops, func(api string) bool { return api == history.APIPermit })
	for lock, k := range locks {
		f.add(k)
		for _, op := range append(k.holds, k.waits...) {
			limit = max(limit, op.Limit)
		}
		if at := mostBelieved(k.holds); len(at) > 0 {
			mostBelief = max(mostBelief, len(at))
			if len(at) > at[0].Limit {
				res.violate("lock %q: %d workers believed they held one of its %d permits at once:\n    %s", lock, len(at), at[0].Limit, opsText(at))
			}
		}
		distinctTokens(&res, lock, k.holds)
		var higher []uint64 // the tokens accepted so far
		for _, a := range k.accesses {
			if a.Type != history.OK {
				continue
			}
			n := 0
			for _, t := range higher {
				if t > a.Token {
					n++
				}
			}
			if n >= a.Limit {
				res.violate("lock %q: the resource accepted token %d after %d higher ones (limit %d): %s", lock, a.Token, n, a.Limit, a)
			}
			if !slices.Contains(higher, a.Token) {
				higher = append(higher, a.Token)
			}
		}
		spans := acceptedSpans(&res, lock, k)
		for _, s := range spans {
			var at []*span
			for _, o := range spans {
				if o.first.ID <= s.first.ID && s.first.ID <= o.end.ID {
					at = append(at, o)
				}
			}
			mostWriters = max(mostWriters, len(at))
			if len(at) > s.first.Limit {
				res.violate("lock %q: the resource accepted %d writers at once, over the limit %d: from %s, tokens %s",
					lock, len(at), s.first.Limit, s.first, spanTokens(at))
			}
		}
	}
	res.Figures = fmt.Sprintf("%d permits believed on %d semaphore(s) of limit %d, at most %d at once; %d writes accepted, "+
		"at most %d writers at once; %d holders paused past their hold, %d of their stale writes refused, %d accepted",
		f.holds, len(locks), limit, mostBelief, f.accepted, mostWriters, f.paused, f.staleRefused, f.staleAccepted)
	return res
}

// CheckRWLocks judges the read/write-lock workers' holds (API shared and exclusive): no
// exclusive belief overlapped another belief; no two beliefs had one token; in the resource's
// order, the span of an exclusive holder's accepted accesses overlapped no other holder's, no
// write was accepted after a higher token nor a read after a higher write, and every token it
// accepted was granted to a worker; and no writer starved: away from cluster faults (and their
// recovery), no writer waited the liveness bound in vain.
func CheckRWLocks(ops []history.Op, cfg Config) Result {
	res := newResult("rwlock")
	var f kindFigures
	faults := history.Faults(ops)
	readers, writers, writerWaits := 0, 0, 0
	var longest time.Duration
	locks := collectKinds(ops, func(api string) bool { return api == history.APIShared || api == history.APIExclusive })
	for lock, k := range locks {
		f.add(k)
		for i, h := range k.holds {
			if h.API == history.APIShared {
				readers++
				continue
			}
			writers++
			for j, o := range k.holds {
				if i != j && o.Invoke < h.Complete && h.Invoke < o.Complete {
					res.violate("lock %q: an exclusive holder overlapped another holder:\n    %s\n    %s", lock, h, o)
				}
			}
		}
		distinctTokens(&res, lock, k.holds)
		var seen, written uint64
		for _, a := range k.accesses {
			if a.Type != history.OK {
				continue
			}
			if after := map[bool]uint64{true: seen, false: written}[a.API == history.APIExclusive]; a.Token < after {
				res.violate("lock %q: the resource accepted an access (%s) under token %d after token %d: %s", lock, a.API, a.Token, after, a)
			}
			seen = max(seen, a.Token)
			if a.API == history.APIExclusive {
				written = max(written, a.Token)
			}
		}
		spans := acceptedSpans(&res, lock, k)
		for _, s := range spans {
			for _, o := range spans {
				if s.exclusive && s != o && s.overlaps(o) {
					res.violate("lock %q: the resource accepted a writer beside another holder: token %d from %s to %s, token %d from %s to %s",
						lock, s.token, s.first, s.end, o.token, o.first, o.end)
				}
			}
		}
		for _, w := range k.waits {
			if w.API != history.APIExclusive || w.WaitNS == 0 {
				continue
			}
			writerWaits++
			if w.Type == history.OK {
				longest = max(longest, w.Duration())
				continue
			}
			if w.Duration() >= cfg.LivenessBound && !nearFault(faults, w.Invoke, w.Complete, cfg.Recovery) {
				res.violate("lock %q: a writer starved: it waited %s (the bound is %s) away from any fault: %s",
					lock, w.Duration().Round(time.Millisecond), cfg.LivenessBound, w)
			}
		}
	}
	res.Figures = fmt.Sprintf("%d shared and %d exclusive holds believed on %d lock(s); %d accesses accepted; %d writer waits, "+
		"the longest granted %s (bound %s); %d holders paused past their hold, %d of their stale accesses refused, %d accepted",
		readers, writers, len(locks), f.accepted, writerWaits, longest.Round(time.Millisecond), cfg.LivenessBound,
		f.paused, f.staleRefused, f.staleAccepted)
	return res
}

func opsText(ops []history.Op) string {
	lines := make([]string, len(ops))
	for i, op := range ops {
		lines[i] = op.String()
	}
	return strings.Join(lines, "\n    ")
}

func spanTokens(spans []*span) string {
	tokens := make([]string, len(spans))
	for i, sp := range spans {
		tokens[i] = fmt.Sprint(sp.token)
	}
	return strings.Join(tokens, ", ")
}
