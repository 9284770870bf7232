package checker

import (
	"fmt"
	"sort"

	"github.com/raftlock/raftlock/jepsen/history"
)

// CheckTokenOrder checks that each token of a lock belongs to one session (a re-acquire by the
// holder returns the same token), and that grants are ordered by real time: a grant that
// completed before another was invoked has the lower token.
func CheckTokenOrder(ops []history.Op, _ Config) Result {
	res := newResult("token-order")
	byLock := okAcquires(ops)
	grants, tokens := 0, 0
	for _, lock := range sortedKeys(byLock) {
		acqs := byLock[lock]
		grants += len(acqs)
		owner := map[uint64]history.Op{}
		for _, a := range acqs {
			if a.OutToken == 0 {
				res.violate("lock %q: grant without a token:\n%s", lock, a)
				continue
			}
			prev, ok := owner[a.OutToken]
			if !ok {
				owner[a.OutToken] = a
				continue
			}
			if sessionOf(prev) != sessionOf(a) {
				res.violate("lock %q: token %d granted to two sessions:\n%s\n%s", lock, a.OutToken, prev, a)
			}
		}
		tokens += len(owner)
		checkRealTimeOrder(&res, lock, acqs)
	}
	res.Figures = fmt.Sprintf("%d grants, %d distinct tokens over %d locks", grants, tokens, len(byLock))
	return res
}

// checkRealTimeOrder sweeps the grants by invocation, keeping the highest token among grants
// that completed before the current one was invoked.
func checkRealTimeOrder(res *Result, lock string, acqs []history.Op) {
	byComplete := append([]history.Op(nil), acqs...)
	sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].Complete < byComplete[j].Complete })
	var best history.Op
	have := false
	k := 0
	for _, a := range acqs { // ordered by Invoke
		for k < len(byComplete) && byComplete[k].Complete < a.Invoke {
			if !have || byComplete[k].OutToken > best.OutToken {
				best, have = byComplete[k], true
			}
			k++
		}
		if have && a.OutToken < best.OutToken {
			res.violate("lock %q: token %d granted after token %d had been granted:\n%s\nafter\n%s",
				lock, a.OutToken, best.OutToken, a, best)
		}
	}
}

func sessionOf(op history.Op) string {
	if op.OutSession != "" {
		return op.OutSession
	}
	return op.Session
}
