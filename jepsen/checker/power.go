package checker

import (
	"fmt"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/jepsen/history"
)

// Names of the disk faults, as the nemesis calls them.
const (
	FaultPowerLoss    = "power-loss"
	FaultPowerLossAll = "power-loss-all"
	FaultDiskEIO      = "disk-eio"
	FaultDiskFull     = "disk-full"
	FaultDiskSlow     = "disk-slow"
	FaultDiskLoss     = "disk-loss"
)

// powerFaults are the faults after which the nemesis audits the cluster.
var powerFaults = []string{FaultPowerLoss, FaultPowerLossAll}

// audit is what the nemesis read after one power loss.
type audit struct {
	id       int
	cut      int64 // when the first node lost power
	global   *history.Op
	acl      *history.Op // the policies listed, with ACLs on
	locks    map[string]history.Op
	canaries []history.Op
	failed   *history.Op
}

// audits collects, per power loss, its cut time, canaries and audit reads, in fault order.
func audits(ops []history.Op) []*audit {
	byID := map[int]*audit{}
	var order []*audit
	get := func(id int) *audit {
		a := byID[id]
		if a == nil {
			a = &audit{id: id, locks: map[string]history.Op{}}
			byID[id] = a
			order = append(order, a)
		}
		return a
	}
	for _, op := range ops {
		switch {
		case op.Kind == history.Nemesis && op.Action == history.ActionStart && slices.Contains(powerFaults, op.Fault):
			get(op.FaultID).cut = op.Invoke
		case op.Kind == history.Canary:
			a := get(op.FaultID)
			a.canaries = append(a.canaries, op)
		case op.Kind == history.Audit && op.Type != history.OK:
			get(op.FaultID).failed = &op
		case op.Kind == history.Audit && op.API == history.CanaryACL:
			get(op.FaultID).acl = &op
		case op.Kind == history.Audit && op.Lock == "":
			get(op.FaultID).global = &op
		case op.Kind == history.Audit:
			get(op.FaultID).locks[op.Lock] = op
		}
	}
	return order
}

// powerCounts are the acknowledged operations one audit checked.
type powerCounts struct {
	grants, releases, reads, ends, live, canaries int
	judged                                        int // canaries judged (canaries: those that survived)
}

func (c powerCounts) total() int {
	return c.grants + c.releases + c.reads + c.ends + c.live + c.canaries
}

// checkPowerLosses checks that the state the cluster holds after each power loss keeps every
// acknowledged operation: the canaries written up to the cut (sessions exist, grants are held
// under their tokens, releases are not undone), and every acknowledged operation of the
// workload before the audit (no lock's modify_index below an index acknowledged on it, nor the
// applied index below any acknowledged index; no acknowledged release undone; no ended session
// back; every session that was renewed within its TTL still there). It returns a summary.
func checkPowerLosses(res *Result, ops []history.Op, cfg Config) string {
	as := audits(ops)
	if len(as) == 0 {
		return ""
	}
	var per []string
	total, canaries, canariesOK := 0, 0, 0
	for _, a := range as {
		if a.failed != nil || a.global == nil {
			why := "the nemesis never read the cluster"
			if a.failed != nil {
				why = a.failed.Error
			}
			res.violate("power loss (fault %d): the cluster could not be audited afterwards: %s", a.id, why)
			per = append(per, "unaudited")
			continue
		}
		c := checkAudit(res, a, ops, cfg)
		canaries += c.judged
		canariesOK += c.canaries
		total += c.total()
		per = append(per, fmt.Sprint(c.total()))
	}
	return fmt.Sprintf("; %d power losses, %d acknowledged ops checked against the state after them (per loss: %s; %d of %d acknowledged canary writes survived)",
		len(as), total, strings.Join(per, ", "), canariesOK, canaries)
}

// checkAudit checks one audit and counts what it checked.
func checkAudit(res *Result, a *audit, ops []history.Op, cfg Config) powerCounts {
	var c powerCounts
	at := a.global.Invoke
	sessions := map[string]bool{}
	for _, s := range strings.Fields(a.global.Sessions) {
		sessions[s] = true
	}
	c.canaries, c.judged = checkCanaries(res, a, sessions)

	maxIndex, maxOp := uint64(0), history.Op{}
	for _, op := range ops {
		if op.Type != history.OK || op.Complete >= at || op.Kind == history.Audit {
			continue
		}
		idx, ok := ackedIndex(op)
		if !ok {
			continue
		}
		if idx > maxIndex {
			maxIndex, maxOp = idx, op
		}
		if op.Kind == history.Canary {
			continue
		}
		l, audited := a.locks[op.Lock]
		if !audited {
			continue
		}
		if op.Kind == history.Read {
			c.reads++
		} else {
			c.grants++
		}
		if l.OutIndex < idx {
			res.violate("power loss (fault %d): lock %q was at index %d after it, below index %d acknowledged before:\n%s\nthen\n%s",
				a.id, op.Lock, l.OutIndex, idx, op, l)
		}
	}
	if a.global.OutIndex < maxIndex {
		res.violate("power loss (fault %d): the cluster's applied index was %d after it, below index %d acknowledged before:\n%s\nthen\n%s",
			a.id, a.global.OutIndex, maxIndex, maxOp, *a.global)
	}
	c.releases, c.ends, c.live = checkAuditSessions(res, a, ops, sessions, cfg)
	return c
}

// ackedIndex is the Raft index an acknowledged op proves the cluster reached.
func ackedIndex(op history.Op) (uint64, bool) {
	switch op.Kind {
	case history.Acquire, history.ClientAcquire, history.Believe:
		return op.OutToken, op.OutToken != 0
	case history.Read:
		return op.OutIndex, op.OutIndex != 0
	case history.Cancel:
		return op.OutToken, op.Held && op.OutToken != 0
	case history.Canary:
		return op.OutToken, op.API == history.CanaryGrant && op.OutToken != 0
	}
	return 0, false
}

// checkCanaries checks the canary writes of one power loss against its audit.
func checkCanaries(res *Result, a *audit, sessions map[string]bool) (survived, judged int) {
	released := map[string]history.Type{}
	for _, op := range a.canaries {
		if op.API == history.CanaryRelease {
			released[op.Lock] = op.Type
		}
	}
	for _, op := range a.canaries {
		if op.Type != history.OK {
			continue
		}
		if t, ok := released[op.Lock]; ok && t != history.Fail && op.API == history.CanaryGrant {
			continue // judged by its release (or unknown)
		}
		judged++
		l := a.locks[op.Lock]
		switch op.API {
		case history.CanarySession:
			if !sessions[op.Session] {
				res.violate("power loss (fault %d): an acknowledged session was lost:\n%s\nthen %d sessions existed after it", a.id, op, len(sessions))
				continue
			}
		case history.CanaryGrant:
			if !l.Held || l.OutSession != op.Session || l.OutToken != op.OutToken {
				res.violate("power loss (fault %d): an acknowledged grant was lost:\n%s\nthen\n%s", a.id, op, l)
				continue
			}
		case history.CanaryRelease:
			if l.Held && l.OutSession == op.Session && l.OutToken == op.Token {
				res.violate("power loss (fault %d): an acknowledged release was undone:\n%s\nthen\n%s", a.id, op, l)
				continue
			}
		case history.CanaryACL:
			if a.acl == nil || !slices.Contains(strings.Fields(a.acl.Detail), op.Detail) {
				res.violate("power loss (fault %d): an acknowledged ACL policy was lost:\n%s", a.id, op)
				continue
			}
		}
		survived++
	}
	return survived, judged
}

// checkAuditSessions checks the workload's releases and sessions against one audit: no
// acknowledged release undone, no ended session back, and every session renewed (or created)
// within its TTL of the audit's end still there.
func checkAuditSessions(res *Result, a *audit, ops []history.Op, sessions map[string]bool, cfg Config) (releases, ends, live int) {
	at, end := a.global.Invoke, a.global.Complete
	ttl := map[string]int64{}
	lastAck := map[string]history.Op{}
	destroyed := map[string]bool{}
	for _, op := range ops {
		if op.Process == -2 || op.Session == "" {
			continue
		}
		switch {
		case op.Kind == history.CreateSession && op.Type == history.OK:
			ttl[op.Session] = op.TTLNS
			lastAck[op.Session] = op
		case op.Kind == history.Renew && op.Type == history.OK:
			if prev, ok := lastAck[op.Session]; !ok || op.Invoke > prev.Invoke {
				lastAck[op.Session] = op
			}
		case op.Kind == history.Destroy && op.Invoke < end:
			destroyed[op.Session] = true
		}
		if op.Complete >= at {
			continue
		}
		switch {
		case op.Kind == history.Release && op.Type == history.OK:
			if l, ok := a.locks[op.Lock]; ok {
				releases++
				if l.Held && l.OutSession == op.Session && l.OutToken == op.Token {
					res.violate("power loss (fault %d): an acknowledged release was undone:\n%s\nthen\n%s", a.id, op, l)
				}
			}
		case provesEnd(op):
			ends++
			if sessions[op.Session] {
				res.violate("power loss (fault %d): an ended session was back after it:\n%s\nthen %d sessions existed", a.id, op, len(sessions))
			}
			destroyed[op.Session] = true
		}
	}
	slack := 1 - cfg.ClockRateError
	for s, op := range lastAck {
		d := ttl[s]
		if destroyed[s] || d == 0 || op.Complete >= at || float64(end) >= float64(op.Invoke)+float64(d)*slack {
			continue
		}
		live++
		if !sessions[s] {
			res.violate("power loss (fault %d): session %s, acknowledged within its TTL before the audit, was lost:\n%s\nthen %d sessions existed",
				a.id, shortID(s), op, len(sessions))
		}
	}
	return releases, ends, live
}

// CheckDisk checks the disk faults: a node whose fsync failed stopped within the nemesis's
// bound and said why in its log, and a node that stopped on a full disk said why. It counts the
// disk faults injected.
func CheckDisk(ops []history.Op, _ Config) Result {
	res := newResult("disk")
	counts := map[string]int{}
	stopped := map[string]int{}
	for _, op := range ops {
		if op.Kind != history.Nemesis {
			continue
		}
		switch op.Fault {
		case FaultDiskEIO, FaultDiskFull, FaultDiskSlow, FaultDiskLoss:
		default:
			continue
		}
		switch op.Action {
		case history.ActionStart:
			counts[op.Fault]++
		case history.ActionEvent:
			if op.Type != history.OK {
				res.violate("%s (fault %d): %s", op.Fault, op.FaultID, op.Error)
			} else if strings.Contains(op.Detail, " stopped") || strings.Contains(op.Detail, " refused") {
				stopped[op.Fault]++
			}
		}
	}
	if len(counts) == 0 {
		res.Figures = "no disk faults injected"
		return res
	}
	res.Figures = fmt.Sprintf("disk-eio %d (%d nodes stopped saying why), disk-full %d (%d stopped saying why, the others needed no new space), disk-slow %d, "+
		"disk-loss %d (%d wiped nodes refused to start under their old id)",
		counts[FaultDiskEIO], stopped[FaultDiskEIO], counts[FaultDiskFull], stopped[FaultDiskFull], counts[FaultDiskSlow],
		counts[FaultDiskLoss], stopped[FaultDiskLoss])
	return res
}
