package nemesis

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
)

// memberWait bounds each step of a membership change: an addition, a promotion once the new
// member caught up, a removal and the removed node's exit, a rejoin.
const memberWait = 30 * time.Second

// removedExitWait is how long the removed spare may take to learn of its removal and stop by
// itself before the nemesis stops it, as an operator would: a removed node whose last
// configuration message was lost asks the others after hearing no leader for 5 s or ten
// election timeouts (docs/operations.md, "Removing and replacing a node").
func (n *Nemesis) removedExitWait() time.Duration {
	return max(5*time.Second, 10*n.cfg.ElectionTimeout) + 5*time.Second
}

// membership changes the cluster's members the way an operator does, while the workload runs:
// it starts the spare node and adds it as a non-voter (POST /v1/cluster/members), promotes it
// once it has caught up (POST /v1/cluster/members/{id}/promote), removes a voter (the leader a
// third of the time) and, once it stopped, replaces it by a new node at the same addresses
// (its data directory emptied, started with --join, as docs/operations.md says: a node still
// counted as a member is refused on an empty data dir, so the removal comes first), hands
// leadership to a random voter (the spare included), and removes the spare again. The cluster
// keeps at least three voters throughout, ends with the members it started with, and every
// step is recorded as an event; a step that fails is recorded with its error, which fails the
// operator checker.
func (n *Nemesis) membership(ctx context.Context) {
	spare := n.c.Spare
	if spare == nil || spare.State() != cluster.Stopped {
		n.logf("%s: no stopped spare node to add", Membership)
		return
	}
	id := n.rec.NewFaultID()
	n.record(Membership, history.ActionStart, id, n.rec.Now(),
		fmt.Sprintf("add %s as a non-voter and promote it, remove a voter and replace it at its addresses, transfer leadership, remove %s", spare.ID, spare.ID), nil)
	var errs []error
	step := func(detail func() string, do func() error) bool {
		inv := n.rec.Now()
		err := do()
		n.record(Membership, history.ActionEvent, id, inv, detail(), err)
		errs = append(errs, err)
		return err == nil
	}
	var victim *cluster.Node
	ok := step(func() string { return "added " + spare.ID + " as a non-voter" }, func() error { return n.addNonVoter(ctx, spare) }) &&
		step(func() string { return "promoted " + spare.ID + " once it caught up" }, func() error { return n.promote(ctx, spare) })
	if ok {
		var what, how string
		victim, what = n.target(ctx, 0.33)
		if victim == spare { // it leads: take another
			others := n.running(nil)
			victim = others[n.rng.Intn(len(others))]
			what = "node " + victim.ID
		}
		ok = victim != nil && step(func() string { return "removed " + what + ", which " + how },
			func() error {
				var err error
				how, err = n.removeMember(ctx, victim, false)
				return err
			})
	}
	if ok {
		var note string
		ok = step(func() string {
			return "replaced " + victim.ID + " by a new node at the same addresses (empty data dir, --join): a voter again" + note
		}, func() error {
			var err error
			note, err = n.rejoinAsNew(ctx, victim)
			return err
		})
	}
	if ok {
		var from, to string
		step(func() string { return fmt.Sprintf("leadership transferred from %s to %s", from, to) }, func() error {
			var err error
			from, to, err = n.transferTo(ctx, append(append([]*cluster.Node(nil), n.c.Nodes...), spare))
			return err
		})
	}
	// The spare leaves whatever happened before, and a victim that is out is brought back.
	var how string
	step(func() string { return "removed " + spare.ID + ", which " + how }, func() error {
		var err error
		how, err = n.removeMember(ctx, spare, true)
		if err == nil {
			err = spare.WipeData()
		}
		return err
	})
	if victim != nil && victim.State() == cluster.Stopped {
		var note string
		step(func() string { return "brought " + victim.ID + " back as a new member" + note }, func() error {
			var err error
			note, err = n.rejoinAsNew(ctx, victim)
			return err
		})
	}
	n.record(Membership, history.ActionStop, id, n.rec.Now(), "members as before: "+strings.Join(n.c.IDs(), ","), errors.Join(errs...))
}

// How the removed spare ended, in its event's detail (counted by the operator checker).
const (
	stoppedByItself    = "stopped by itself"
	notStoppedByItself = "had not stopped by itself after"
)

// transferTo hands leadership to a voter of voters other than the leader, picked at random,
// and waits until it leads: a transfer whose answer is late (the target catching up first) is
// asked again of whichever node leads then, for up to memberWait.
func (n *Nemesis) transferTo(ctx context.Context, voters []*cluster.Node) (from, to string, err error) {
	l, _, err := n.c.Leader(ctx)
	if err != nil {
		return "", "", err
	}
	var others []*cluster.Node
	for _, v := range voters {
		if v != l {
			others = append(others, v)
		}
	}
	target := others[n.rng.Intn(len(others))]
	wctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	err = cluster.Poll(wctx, 200*time.Millisecond, func() error {
		cur, _, err := n.c.Leader(wctx)
		if err != nil {
			return err
		}
		if cur == target {
			return nil
		}
		if _, err := n.c.TransferLeadership(wctx, cur, target.ID); err != nil {
			return err
		}
		return fmt.Errorf("%s does not lead yet", target.ID)
	})
	return l.ID, target.ID, err
}

// running are the members whose process runs, less except.
func (n *Nemesis) running(except *cluster.Node) []*cluster.Node {
	var out []*cluster.Node
	for _, o := range n.c.Nodes {
		if o != except && o.State() == cluster.Running {
			out = append(out, o)
		}
	}
	return out
}

// viaAny calls f with each running member in turn (but except), until one call succeeds,
// for up to memberWait.
func (n *Nemesis) viaAny(ctx context.Context, except *cluster.Node, f func(context.Context, *cluster.Node) error) error {
	wctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	return cluster.Poll(wctx, 200*time.Millisecond, func() error {
		err := errors.New("no other member runs")
		for _, o := range n.running(except) {
			if err = f(wctx, o); err == nil {
				return nil
			}
		}
		return err
	})
}

// addNonVoter starts the spare on an empty data dir, with neither --initial-cluster nor
// --join, and adds it as a non-voter through a member.
func (n *Nemesis) addNonVoter(ctx context.Context, spare *cluster.Node) error {
	if err := spare.WipeData(); err != nil {
		return err
	}
	// The build of a member picked at random: in an upgrade's mixed window, either.
	spare.SetBinary(n.c.Nodes[n.rng.Intn(len(n.c.Nodes))].Binary())
	if err := spare.StartWithToken(n.c.AgentToken()); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, restartWait)
	err := n.c.WaitHealthy(wctx, spare)
	cancel()
	if err != nil {
		return err
	}
	if err := n.viaAny(ctx, nil, func(ctx context.Context, o *cluster.Node) error {
		return n.c.AddMember(ctx, o, spare, "nonvoter")
	}); err != nil {
		return fmt.Errorf("add %s: %w", spare.ID, err)
	}
	return n.waitSuffrage(ctx, spare, "nonvoter")
}

// promote asks for the spare's promotion until the leader grants it (409 not_caught_up
// until it has caught up), then waits until the spare's own view makes it a voter.
func (n *Nemesis) promote(ctx context.Context, node *cluster.Node) error {
	if err := n.viaAny(ctx, node, func(ctx context.Context, o *cluster.Node) error {
		status, err := n.c.PromoteMember(ctx, o, node.ID)
		if err != nil && status != http.StatusConflict && status != http.StatusServiceUnavailable {
			return fmt.Errorf("%w (not a refusal to wait out)", err)
		}
		return err
	}); err != nil {
		return fmt.Errorf("promote %s: %w", node.ID, err)
	}
	return n.waitSuffrage(ctx, node, "voter")
}

// waitSuffrage waits until node itself and the leader both list node with the suffrage.
func (n *Nemesis) waitSuffrage(ctx context.Context, node *cluster.Node, suffrage string) error {
	wctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	return cluster.Poll(wctx, 200*time.Millisecond, func() error {
		if s, err := n.c.Suffrage(wctx, node, node.ID); err != nil || s != suffrage {
			return fmt.Errorf("%s lists itself as %q, not %s (%v)", node.ID, s, suffrage, err)
		}
		l, _, err := n.c.Leader(wctx)
		if err != nil {
			return err
		}
		if s, err := n.c.Suffrage(wctx, l, node.ID); err != nil || s != suffrage {
			return fmt.Errorf("the leader %s lists %s as %q, not %s (%v)", l.ID, node.ID, s, suffrage, err)
		}
		return nil
	})
}

// removeMember removes node through another member and ends its process. A removed node
// learns of its removal and stops by itself: with waitSelf the nemesis gives it
// removedExitWait to, else it stops it at once (SIGTERM), as an operator replacing a machine
// does. It says which happened.
func (n *Nemesis) removeMember(ctx context.Context, node *cluster.Node, waitSelf bool) (string, error) {
	if err := n.viaAny(ctx, node, func(ctx context.Context, o *cluster.Node) error {
		err := n.c.RemoveMember(ctx, o, node.ID)
		if err != nil && strings.Contains(err.Error(), "not_found") {
			return nil // removed already (an earlier try's answer was lost)
		}
		return err
	}); err != nil {
		return "", fmt.Errorf("remove %s: %w", node.ID, err)
	}
	if node.State() == cluster.Stopped {
		return "was not running", nil
	}
	if !waitSelf {
		sctx, cancel := context.WithTimeout(ctx, restartWait)
		defer cancel()
		return "was stopped with SIGTERM", node.Stop(sctx)
	}
	wait := n.removedExitWait()
	deadline := time.Now().Add(wait)
	for node.State() != cluster.Stopped && time.Now().Before(deadline) && ctx.Err() == nil {
		hold(ctx, 50*time.Millisecond)
	}
	if node.State() == cluster.Stopped {
		return fmt.Sprintf("%s (status %d)", stoppedByItself, node.ExitCode()), nil
	}
	sctx, cancel := context.WithTimeout(ctx, restartWait)
	defer cancel()
	if err := node.Stop(sctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %s, was stopped with SIGTERM", notStoppedByItself, wait), nil
}

// rejoinAsNew brings a removed, stopped node back as a new member at the same addresses: an
// empty data dir and --join to the running members, then waits until it is a voter. A join
// that is refused ends the agent; it is started again, as a supervisor would, for up to
// memberWait, and each exit is reported (in the returned note) with the agent's last line.
func (n *Nemesis) rejoinAsNew(ctx context.Context, node *cluster.Node) (string, error) {
	if err := node.WipeData(); err != nil {
		return "", err
	}
	var eps []string
	for _, o := range n.running(node) {
		eps = append(eps, o.HTTPAddr)
	}
	var exits []string
	wctx, cancel := context.WithTimeout(ctx, memberWait)
	defer cancel()
	off := node.LogSize()
	err := cluster.Poll(wctx, 200*time.Millisecond, func() error {
		if node.State() == cluster.Stopped {
			if off != node.LogSize() { // it ran and exited: say why
				log, _ := node.LogSince(off)
				exits = append(exits, fmt.Sprintf("status %d: %s", node.ExitCode(), lastLine(log)))
				off = node.LogSize()
			}
			if err := node.WipeData(); err != nil {
				return err
			}
			if err := node.StartJoining(eps, n.c.AgentToken()); err != nil {
				return err
			}
		}
		if s, err := n.c.Suffrage(wctx, node, node.ID); err != nil || s != "voter" {
			return fmt.Errorf("%s lists itself as %q, not voter (%v)", node.ID, s, err)
		}
		return nil
	})
	if err == nil {
		err = n.waitSuffrage(ctx, node, "voter")
	}
	note := ""
	if len(exits) > 0 {
		note = fmt.Sprintf(" (its join ended %d time(s) first and it was started again: %s)", len(exits), strings.Join(exits, "; "))
	}
	return note, err
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
