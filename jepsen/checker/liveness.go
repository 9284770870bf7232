package checker

import (
	"fmt"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// CheckLiveness checks the final phase: after every fault healed, a fresh session probed each
// lock the workload used. Each lock must have been granted to its probe within LivenessBound of
// the probe's first op (its session's creation), however many requests that took.
func CheckLiveness(ops []history.Op, cfg Config) Result {
	res := newResult("liveness")
	used := map[string]bool{}
	first := map[string]history.Op{}   // lock -> first final-phase op
	granted := map[string]history.Op{} // lock -> first ok final-phase acquire
	for _, op := range ops {
		if op.Lock == "" {
			continue
		}
		if op.Phase != history.PhaseFinal {
			if op.Kind == history.Acquire || op.Kind == history.ClientAcquire {
				used[op.Lock] = true
			}
			continue
		}
		if f, ok := first[op.Lock]; !ok || op.Invoke < f.Invoke {
			first[op.Lock] = op
		}
		if op.Kind == history.Acquire && op.Type == history.OK {
			if g, ok := granted[op.Lock]; !ok || op.Complete < g.Complete {
				granted[op.Lock] = op
			}
		}
	}
	if len(used) == 0 {
		res.violate("the workload acquired no lock")
	}
	var slowest time.Duration
	for _, lock := range sortedKeys(used) {
		f, ok := first[lock]
		if !ok {
			res.violate("lock %q was never probed after the faults healed", lock)
			continue
		}
		g, ok := granted[lock]
		if !ok {
			res.violate("lock %q could not be acquired after the faults healed; first probe:\n%s", lock, f)
			continue
		}
		took := time.Duration(g.Complete - f.Invoke)
		if took > slowest {
			slowest = took
		}
		if took > cfg.LivenessBound {
			res.violate("lock %q took %s to acquire after the faults healed, bound %s:\n%s",
				lock, took.Round(time.Millisecond), cfg.LivenessBound, g)
		}
	}
	res.Figures = fmt.Sprintf("%d locks probed after healing, slowest grant %s (bound %s)",
		len(first), slowest.Round(time.Millisecond), cfg.LivenessBound)
	return res
}
