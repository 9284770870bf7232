package nemesis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
)

// canaryProcess is the process id of the nemesis's own canary writes and audits.
const canaryProcess = -2

// canaryTTL outlives any outage and audit, so that a canary session missing afterwards was lost,
// not expired.
const canaryTTL = "5m"

// auditWait bounds how long the cluster may take to answer the audit after a power loss.
const auditWait = 30 * time.Second

// powerLoss cuts the power of a minority of the nodes (all of them with all set): they are
// killed at once, their disks lose what was not durable, and after a few seconds they start
// again. Canary writes run through the leader up to the cut; once the cluster is back, an audit
// reads what it holds, for the durability checker.
func (n *Nemesis) powerLoss(ctx context.Context, all bool) {
	fault, victims := PowerLossAll, n.c.Nodes
	if !all {
		fault, victims = PowerLoss, n.minority(ctx)
	}
	if len(victims) == 0 {
		return
	}
	id := n.rec.NewFaultID()
	stopCanary := make(chan struct{})
	var canaries []history.Op
	var wg sync.WaitGroup
	wg.Go(func() { canaries = n.canary(ctx, id, stopCanary) })
	hold(ctx, n.between(300*time.Millisecond, time.Second))

	inv := n.rec.Now()
	var mu sync.Mutex
	var errs []error
	var kills sync.WaitGroup
	for _, v := range victims {
		kills.Go(func() {
			if err := v.Kill(ctx); err != nil && !errors.Is(err, cluster.ErrNotRunning) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	kills.Wait()
	close(stopCanary)
	wg.Wait()
	var parts []string
	for _, v := range victims {
		rep, err := v.PowerCut(ctx)
		errs = append(errs, err)
		parts = append(parts, fmt.Sprintf("%s: %s", v.ID, rep))
	}
	n.record(fault, history.ActionStart, id, inv, fmt.Sprintf("power cut %s (%s)", ids(victims), strings.Join(parts, "; ")), errors.Join(errs...))
	hold(ctx, n.between(time.Second, 3*time.Second))

	inv = n.rec.Now()
	errs = nil
	for _, v := range victims {
		errs = append(errs, v.Start())
	}
	wctx, cancel := context.WithTimeout(ctx, auditWait)
	errs = append(errs, n.c.WaitReady(wctx))
	cancel()
	n.record(fault, history.ActionStop, id, inv, "power back on "+ids(victims), errors.Join(errs...))
	n.audit(ctx, id, canaries)
}

// minority picks between one node and a minority of them, the leader among them half the time.
func (n *Nemesis) minority(ctx context.Context) []*cluster.Node {
	k := 1 + n.rng.Intn(max(1, (len(n.c.Nodes)-1)/2))
	var out []*cluster.Node
	if n.rng.Float64() < 0.5 {
		if l, _, err := n.c.Leader(ctx); err == nil {
			out = append(out, l)
		}
	}
	for _, i := range n.rng.Perm(len(n.c.Nodes)) {
		node := n.c.Nodes[i]
		if len(out) < k && node.State() == cluster.Running && !contains(out, node) {
			out = append(out, node)
		}
	}
	return out
}

func contains(nodes []*cluster.Node, n *cluster.Node) bool {
	for _, m := range nodes {
		if m == n {
			return true
		}
	}
	return false
}

func ids(nodes []*cluster.Node) string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.ID)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// canary writes through the leader until stop closes: a session, a grant of a lock of its own,
// and every other time the release of that grant, each recorded. It returns the ops.
func (n *Nemesis) canary(ctx context.Context, id int, stop <-chan struct{}) []history.Op {
	var ops []history.Op
	add := func(op history.Op, o cluster.Outcome, err error) history.Op {
		op.Process, op.Kind, op.FaultID, op.Complete = canaryProcess, history.Canary, id, n.rec.Now()
		switch o {
		case cluster.OK:
			op.Type = history.OK
		case cluster.Fail:
			op.Type = history.Fail
		default:
			op.Type = history.Info
		}
		if err != nil {
			op.Error = err.Error()
		}
		op = n.rec.Add(op)
		ops = append(ops, op)
		return op
	}
	leader, _, err := n.c.Leader(ctx)
	if err != nil {
		return nil
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return ops
		default:
		}
		inv := n.rec.Now()
		if n.c.Secure() {
			name := fmt.Sprintf("jepsen-canary-%d-%d", id, i)
			_, o, err := n.c.CreatePolicy(ctx, leader, name)
			add(history.Op{API: history.CanaryACL, Invoke: inv, Detail: name, Node: leader.ID}, o, err)
			inv = n.rec.Now()
		}
		s, o, err := n.c.CreateSession(ctx, leader, "jepsen-canary", canaryTTL)
		sop := add(history.Op{API: history.CanarySession, Invoke: inv, Session: s.ID, Node: leader.ID}, o, err)
		if sop.Type != history.OK {
			hold(ctx, 20*time.Millisecond)
			continue
		}
		lock := fmt.Sprintf("jepsen-canary-%d-%d", id, i)
		inv = n.rec.Now()
		tok, o, err := n.c.Acquire(ctx, leader, lock, s.ID)
		gop := add(history.Op{API: history.CanaryGrant, Invoke: inv, Lock: lock, Session: s.ID, OutToken: tok, Node: leader.ID}, o, err)
		hold(ctx, 20*time.Millisecond) // a few dozen canaries per cut are plenty
		if gop.Type != history.OK || i%2 == 0 {
			continue
		}
		inv = n.rec.Now()
		o, err = n.c.Release(ctx, leader, lock, s.ID, tok)
		add(history.Op{API: history.CanaryRelease, Invoke: inv, Lock: lock, Session: s.ID, Token: tok, Node: leader.ID}, o, err)
	}
}

// audit reads, once the cluster is back, every lock of the workload and of the canaries and
// every session, linearizably through the leader, and records what it saw. It then destroys
// the canary sessions.
func (n *Nemesis) audit(ctx context.Context, id int, canaries []history.Op) {
	locks := append([]string(nil), n.cfg.Locks...)
	for _, op := range canaries {
		if op.API == history.CanaryGrant {
			locks = append(locks, op.Lock)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, auditWait)
	defer cancel()
	var ops []history.Op
	err := cluster.Poll(ctx, 100*time.Millisecond, func() error {
		ops = nil
		l, err := n.c.WaitLeader(ctx)
		if err != nil {
			return err
		}
		inv := n.rec.Now()
		snap, err := n.c.ReadAll(ctx, l)
		if err != nil {
			return err
		}
		var sessions []string
		for _, s := range snap.Sessions {
			sessions = append(sessions, s.ID)
		}
		ops = append(ops, history.Op{Invoke: inv, Complete: n.rec.Now(), OutIndex: snap.Index, Sessions: strings.Join(sessions, " "), Node: l.ID})
		if n.c.Secure() {
			inv := n.rec.Now()
			policies, err := n.c.Policies(ctx, l)
			if err != nil {
				return err
			}
			var names []string
			for _, p := range policies {
				names = append(names, p.Name)
			}
			ops = append(ops, history.Op{Invoke: inv, Complete: n.rec.Now(), API: history.CanaryACL, Detail: strings.Join(names, " "), Node: l.ID})
		}
		for _, name := range locks {
			inv := n.rec.Now()
			lk, err := n.c.ReadLock(ctx, l, name)
			if err != nil {
				return err
			}
			ops = append(ops, history.Op{Invoke: inv, Complete: n.rec.Now(), Lock: name, Held: lk.Held,
				OutSession: lk.Session, OutToken: lk.Token, OutIndex: lk.ModifyIndex, Node: l.ID})
		}
		return nil
	})
	if err != nil {
		n.rec.Add(history.Op{Process: canaryProcess, Kind: history.Audit, Type: history.Info, FaultID: id,
			Invoke: n.rec.Now(), Complete: n.rec.Now(), Error: err.Error()})
		n.logf("audit after power loss (fault %d) could not read the cluster: %v", id, err)
		return
	}
	for _, op := range ops {
		op.Process, op.Kind, op.Type, op.FaultID = canaryProcess, history.Audit, history.OK, id
		n.rec.Add(op)
	}
	n.logf("audit after power loss (fault %d): read %d locks and %d sessions, applied index %d",
		id, len(locks), len(strings.Fields(ops[0].Sessions)), ops[0].OutIndex)
	for _, op := range canaries {
		l, _, err := n.c.Leader(ctx)
		if err != nil || op.Type == history.Fail {
			continue
		}
		switch op.API {
		case history.CanarySession:
			_ = n.c.DestroySession(ctx, l, op.Session)
		case history.CanaryACL:
			_ = n.c.DeletePolicy(ctx, l, op.Detail)
		}
	}
}
