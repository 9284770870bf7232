package checker

import "github.com/raftlock/raftlock/jepsen/history"

// powerLoss is a power cut at 100ms (fault 1) preceded by canaries of session s2 (a grant of
// "c" under token 20, released, and a grant of "d" under 21), a workload grant of "a" to s1
// under token 5, and an audit at 500ms of what the cluster holds (index is its applied index,
// a and d the states of those locks, sessions those listed).
func powerLoss(index uint64, a, d history.Op, sessions string) *syn {
	b := (&syn{}).create(s1, 0, 5).acquire(s1, "a", 5, 10, 20).
		add(history.Op{Kind: history.Canary, API: history.CanarySession, Session: s2, FaultID: 1}, 30, 35).
		add(history.Op{Kind: history.Canary, API: history.CanaryGrant, Lock: "c", Session: s2, OutToken: 20, FaultID: 1}, 40, 45).
		add(history.Op{Kind: history.Canary, API: history.CanaryRelease, Lock: "c", Session: s2, Token: 20, FaultID: 1}, 50, 55).
		add(history.Op{Kind: history.Canary, API: history.CanaryGrant, Lock: "d", Session: s2, OutToken: 21, FaultID: 1}, 60, 65).
		add(history.Op{Kind: history.Nemesis, Fault: FaultPowerLossAll, Action: history.ActionStart, FaultID: 1}, 100, 110).
		add(history.Op{Kind: history.Audit, FaultID: 1, OutIndex: index, Sessions: sessions}, 500, 510)
	a.Kind, a.FaultID, a.Lock = history.Audit, 1, "a"
	d.Kind, d.FaultID, d.Lock = history.Audit, 1, "d"
	return b.add(a, 510, 520).add(d, 520, 530).
		add(history.Op{Kind: history.Audit, FaultID: 1, Lock: "c", OutIndex: 22}, 530, 540)
}

func powerCases() []Case {
	aHeld := history.Op{Held: true, OutSession: s1, OutToken: 5, OutIndex: 5}
	dHeld := history.Op{Held: true, OutSession: s2, OutToken: 21, OutIndex: 21}
	both := s1 + " " + s2
	return []Case{
		{"durability: everything acknowledged survives a power loss", true, with(powerLoss(23, aHeld, dHeld, both), CheckDurability)},
		{"durability: a canary grant lost to a power loss", false, with(powerLoss(23, aHeld, history.Op{OutIndex: 3}, both), CheckDurability)},
		{"durability: a canary session lost to a power loss", false, with(powerLoss(23, aHeld, dHeld, s1), CheckDurability)},
		{"durability: the log's tail lost to a power loss (applied index went back)", false, with(powerLoss(4, aHeld, dHeld, both), CheckDurability)},
		{"durability: a workload grant's index lost to a power loss", false, with(powerLoss(23, history.Op{OutIndex: 3}, dHeld, both), CheckDurability)},
		{"durability: an ACL policy lost to a power loss", false, with(powerLoss(23, aHeld, dHeld, both).
			add(history.Op{Kind: history.Canary, API: history.CanaryACL, Detail: "p1", FaultID: 1}, 70, 75).
			add(history.Op{Kind: history.Audit, API: history.CanaryACL, Detail: "p0", FaultID: 1}, 540, 550), CheckDurability)},
		{"durability: an ACL policy that survives a power loss", true, with(powerLoss(23, aHeld, dHeld, both).
			add(history.Op{Kind: history.Canary, API: history.CanaryACL, Detail: "p1", FaultID: 1}, 70, 75).
			add(history.Op{Kind: history.Audit, API: history.CanaryACL, Detail: "p0 p1", FaultID: 1}, 540, 550), CheckDurability)},
		{"durability: a power loss never audited", false, with((&syn{}).
			add(history.Op{Kind: history.Nemesis, Fault: FaultPowerLoss, Action: history.ActionStart, FaultID: 1}, 100, 110).
			add(history.Op{Kind: history.Audit, Type: history.Info, FaultID: 1, Error: "no leader"}, 500, 510), CheckDurability)},
		{"disk: a node stopped on EIO, saying why", true, with((&syn{}).
			add(history.Op{Kind: history.Nemesis, Fault: FaultDiskEIO, Action: history.ActionStart, FaultID: 1}, 0, 1).
			add(history.Op{Kind: history.Nemesis, Fault: FaultDiskEIO, Action: history.ActionEvent, FaultID: 1, Detail: "n1 stopped: ..."}, 10, 20), CheckDisk)},
		{"disk: a node went on after its fsync failed", false, with((&syn{}).
			add(history.Op{Kind: history.Nemesis, Fault: FaultDiskEIO, Action: history.ActionStart, FaultID: 1}, 0, 1).
			add(history.Op{Kind: history.Nemesis, Fault: FaultDiskEIO, Action: history.ActionEvent, FaultID: 1, Type: history.Info,
				Error: "n1 still running 10s after its disk began to fail"}, 10, 20), CheckDisk)},
	}
}
