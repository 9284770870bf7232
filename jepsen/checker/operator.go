package checker

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/raftlock/raftlock/jepsen/history"
)

// The operator's actions as faults (the nemesis's names).
const (
	// FaultMembership adds, promotes, removes and replaces members and moves leadership.
	FaultMembership = "membership"
	// FaultUpgrade rolls the nodes between an old build and a new one.
	FaultUpgrade = "upgrade"
)

// CheckOperator judges the operator's actions the membership and upgrade nemeses took: every
// step must have succeeded (a member added, promoted once caught up, removed, replaced at its
// addresses; a node restarted on another build and ready; an old build refusing data whose
// features it lacks), and no feature that only the new build supports may be seen enabled, by
// any member, while a member runs the old build. The nemesis's own ops are in its order, so
// each feature observation is judged against the builds recorded before it.
func CheckOperator(ops []history.Op, _ Config) Result {
	res := newResult("operator")
	var nem []history.Op
	for _, op := range ops {
		if op.Kind == history.Nemesis && (op.Fault == FaultMembership || op.Fault == FaultUpgrade) {
			nem = append(nem, op)
		}
	}
	sort.SliceStable(nem, func(i, j int) bool { return nem[i].ID < nem[j].ID })
	counts := map[string]int{}
	builds := map[string]string{}
	var newOnly []string
	var steps, downgrades, refused, observed, early, removed, selfStopped int
	for _, op := range nem {
		if op.Action == history.ActionStart {
			counts[op.Fault]++
		}
		if op.Type != history.OK && op.Action == history.ActionEvent {
			res.violate("%s (fault %d): %s: %s", op.Fault, op.FaultID, op.Detail, op.Error)
		}
		if op.Fault == FaultMembership && op.Type == history.OK && strings.Contains(op.Detail, "stopped by itself") {
			removed++
			if !strings.Contains(op.Detail, "not stopped by itself") {
				selfStopped++
			}
		}
		if op.Fault != FaultUpgrade {
			continue
		}
		for _, f := range history.FeatureList(op.NewFeatures) {
			if !slices.Contains(newOnly, f) {
				newOnly = append(newOnly, f)
			}
		}
		switch {
		case op.Build != "" && op.Node != "":
			if prev, ok := builds[op.Node]; ok && prev != op.Build && op.Type == history.OK {
				steps++
				if op.Build == history.BuildOld {
					downgrades++
				}
			}
			builds[op.Node] = op.Build
		case op.Features != "" && op.Node != "":
			observed++
			var oldNodes []string
			for node, b := range builds {
				if b == history.BuildOld {
					oldNodes = append(oldNodes, node)
				}
			}
			sort.Strings(oldNodes)
			if len(oldNodes) == 0 {
				continue
			}
			for _, f := range history.FeatureList(op.Features) {
				if slices.Contains(newOnly, f) {
					early++
					res.violate("%s had enabled %s, which only the new build supports, while %s still ran the old build (op %d)",
						op.Node, f, strings.Join(oldNodes, ","), op.ID)
					break
				}
			}
		case op.Type == history.OK && strings.Contains(op.Detail, "on the old build after the new features were enabled: refused"):
			refused++
		}
	}
	if len(counts) == 0 {
		res.Figures = "no membership changes or upgrades"
		return res
	}
	var parts []string
	if m := counts[FaultMembership]; m > 0 {
		parts = append(parts, fmt.Sprintf("membership changes %d (%d of %d removed spares stopped by themselves)", m, selfStopped, removed))
	}
	if u := counts[FaultUpgrade]; u > 0 {
		parts = append(parts, fmt.Sprintf("upgrades %d (%d restarts on another build, %d of them back to the old build; %d downgrades after the features were enabled refused; features only the new build supports: %s; %d feature readings, %d too early)",
			u, steps, downgrades, refused, strings.Join(newOnly, ","), observed, early))
	}
	res.Figures = strings.Join(parts, "; ")
	return res
}
