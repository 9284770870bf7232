package checker

import "github.com/raftlock/raftlock/jepsen/history"

// CheckHistory runs every history checker and returns their results in a fixed order, with the
// porcupine outcome kept for its visualisation.
func CheckHistory(ops []history.Op, cfg Config) ([]Result, *Linearizability) {
	lin := CheckLinearizable(ops, cfg)
	return []Result{
		lin.Result,
		CheckFencing(ops, cfg),
		CheckTokenOrder(ops, cfg),
		CheckDurability(ops, cfg),
		CheckExpiry(ops, cfg),
		CheckLiveness(ops, cfg),
		CheckBelief(ops, cfg),
		CheckHeldByNobody(ops, cfg),
		CheckDisk(ops, cfg),
		CheckWatch(ops, cfg),
		CheckSemaphores(ops, cfg),
		CheckRWLocks(ops, cfg),
		CheckOperator(ops, cfg),
	}, lin
}

// Tally counts passed and failed results.
func Tally(results []Result) (passed, failed int) {
	for _, r := range results {
		if r.Valid {
			passed++
		} else {
			failed++
		}
	}
	return passed, failed
}
