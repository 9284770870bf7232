package checker

import "github.com/raftlock/raftlock/jepsen/history"

// upgradeRoll is an upgrade of n1..n3 from the old build to the new one, with a reading of
// the features n1 had enabled after each step; enabledAfter is the step (1 to 3) from whose
// reading on n1 has enabled attempt-ends.
func upgradeRoll(enabledAfter int) *syn {
	ev := func(op history.Op) history.Op {
		op.Kind, op.Fault, op.Action, op.FaultID = history.Nemesis, FaultUpgrade, history.ActionEvent, 1
		return op
	}
	b := (&syn{}).add(history.Op{Kind: history.Nemesis, Fault: FaultUpgrade, Action: history.ActionStart, FaultID: 1}, 0, 1)
	t := int64(10)
	for _, id := range []string{"n1", "n2", "n3"} {
		b.add(ev(history.Op{Node: id, Build: history.BuildOld}), t, t)
	}
	for i, id := range []string{"n1", "n2", "n3"} {
		t += 1000
		b.add(ev(history.Op{Node: id, Build: history.BuildNew}), t, t+500)
		if i == 0 {
			b.add(ev(history.Op{NewFeatures: "attempt-ends"}), t+510, t+520)
		}
		features := "attempt-numbers"
		if i+1 >= enabledAfter {
			features += ",attempt-ends"
		}
		b.add(ev(history.Op{Node: "n1", Features: features}), t+600, t+610)
	}
	return b.add(history.Op{Kind: history.Nemesis, Fault: FaultUpgrade, Action: history.ActionStop, FaultID: 1}, t+700, t+710)
}

func operatorCases() []Case {
	return []Case{
		{"operator: a feature of the new build enabled once the last node runs it", true, with(upgradeRoll(3), CheckOperator)},
		{"operator: a feature of the new build enabled while a node still runs the old one", false, with(upgradeRoll(2), CheckOperator)},
		{"operator: membership changes that all succeeded", true, with((&syn{}).
			add(history.Op{Kind: history.Nemesis, Fault: FaultMembership, Action: history.ActionStart, FaultID: 1}, 0, 1).
			add(history.Op{Kind: history.Nemesis, Fault: FaultMembership, Action: history.ActionEvent, FaultID: 1, Detail: "promoted n4 once it caught up"}, 10, 20), CheckOperator)},
		{"operator: a removed voter that never came back as a new member", false, with((&syn{}).
			add(history.Op{Kind: history.Nemesis, Fault: FaultMembership, Action: history.ActionStart, FaultID: 1}, 0, 1).
			add(history.Op{Kind: history.Nemesis, Fault: FaultMembership, Action: history.ActionEvent, FaultID: 1, Type: history.Info,
				Detail: "replaced n2 by a new node at the same addresses", Error: "n2 lists itself as \"nonvoter\", not voter"}, 10, 20), CheckOperator)},
		{"operator: an old build that served on data whose features it lacks", false, with((&syn{}).
			add(history.Op{Kind: history.Nemesis, Fault: FaultUpgrade, Action: history.ActionStart, FaultID: 1}, 0, 1).
			add(history.Op{Kind: history.Nemesis, Fault: FaultUpgrade, Action: history.ActionEvent, FaultID: 1, Type: history.Info,
				Detail: "n2 started on the old build after the new features were enabled: it served", Error: "n2 serves on the old build"}, 10, 20), CheckOperator)},
	}
}
