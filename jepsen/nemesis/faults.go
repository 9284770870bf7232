package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
)

// stopLogLine waits up to wait (or until ctx ends) for node to stop, and returns the first
// line of its log from byte off on that contains marker, trimmed ("" if none).
func stopLogLine(ctx context.Context, node *cluster.Node, off int64, wait time.Duration, marker string) string {
	deadline := time.Now().Add(wait)
	for node.State() != cluster.Stopped && time.Now().Before(deadline) && ctx.Err() == nil {
		hold(ctx, 50*time.Millisecond)
	}
	log, _ := node.LogSince(off)
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, marker) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// hold keeps a fault in place for d (the schedule is timed by design) or until ctx ends.
func hold(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// restartWait bounds how long a restarted node may take to serve HTTP again.
const restartWait = 15 * time.Second

// target picks the leader with probability leaderBias, else a random running node.
func (n *Nemesis) target(ctx context.Context, leaderBias float64) (*cluster.Node, string) {
	if n.rng.Float64() < leaderBias || n.cfg.TargetLeader {
		if l, _, err := n.c.Leader(ctx); err == nil {
			return l, "leader " + l.ID
		}
	}
	var running []*cluster.Node
	for _, node := range n.c.Nodes {
		if node.State() == cluster.Running {
			running = append(running, node)
		}
	}
	if len(running) == 0 {
		return nil, ""
	}
	t := running[n.rng.Intn(len(running))]
	return t, "node " + t.ID
}

// kill SIGKILLs a node, keeps it down for a few seconds, and restarts it.
func (n *Nemesis) kill(ctx context.Context) {
	node, what := n.target(ctx, 0.5)
	if node == nil {
		return
	}
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	err := node.Kill(ctx)
	n.record(Kill, history.ActionStart, id, inv, "SIGKILL "+what, err)
	hold(ctx, n.between(2*time.Second, 5*time.Second))
	n.bringBack(ctx, Kill, id, node)
}

// restart stops a node gracefully (SIGTERM: it hands leadership over and snapshots), keeps it
// down for a second or two, and starts it again from that snapshot.
func (n *Nemesis) restart(ctx context.Context) {
	node, what := n.target(ctx, 0.5)
	if node == nil {
		return
	}
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	sctx, cancel := context.WithTimeout(ctx, restartWait)
	err := node.Stop(sctx)
	cancel()
	n.record(Restart, history.ActionStart, id, inv, "SIGTERM "+what, err)
	hold(ctx, n.between(time.Second, 2*time.Second))
	n.bringBack(ctx, Restart, id, node)
}

// restartAll stops every running node gracefully at once (SIGTERM, as an operator stopping the
// whole cluster does), keeps the cluster down for a second or two, and starts every node again.
// Leadership moves to nodes that are themselves stopping, every node snapshots, and the cluster
// comes back from those snapshots with no node that stayed up.
func (n *Nemesis) restartAll(ctx context.Context) {
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	failed := n.c.StopAll(ctx, restartWait)
	var errs []error
	for _, node := range n.c.Nodes {
		if err := failed[node.ID]; err != nil {
			errs = append(errs, err)
		}
	}
	n.record(RestartAll, history.ActionStart, id, inv, "SIGTERM every node", errors.Join(errs...))
	hold(ctx, n.between(time.Second, 2*time.Second))
	inv = n.rec.Now()
	errs = nil
	for _, node := range n.c.Nodes {
		if node.State() == cluster.Stopped {
			errs = append(errs, node.Start())
		}
	}
	wctx, cancel := context.WithTimeout(ctx, restartWait)
	errs = append(errs, n.c.WaitReady(wctx))
	cancel()
	n.record(RestartAll, history.ActionStop, id, inv, "restarted every node", errors.Join(errs...))
}

// bringBack starts a stopped node again, waits until it serves, and records the fault's end.
func (n *Nemesis) bringBack(ctx context.Context, fault string, id int, node *cluster.Node) {
	inv := n.rec.Now()
	err := node.Start()
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, restartWait)
		err = n.c.WaitHealthy(wctx, node)
		cancel()
	}
	n.record(fault, history.ActionStop, id, inv, "restarted "+node.ID, err)
}

// newLeader waits briefly for a leader other than old, for the log; "?" if none shows up.
func (n *Nemesis) newLeader(ctx context.Context, old string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if l, _, err := n.c.Leader(ctx); err == nil && l.ID != old {
			return l.ID
		}
		hold(ctx, 50*time.Millisecond)
	}
	return "?"
}

// pauseHold is how long a paused node stays stopped: longer than the election timeout and
// longer than the session TTL, so a paused leader is deposed and its sessions' timers run out.
func (n *Nemesis) pauseHold() time.Duration {
	base := max(n.cfg.TTL, n.cfg.ElectionTimeout)
	return base + base/2 + n.between(time.Second, 2*time.Second)
}

// pause SIGSTOPs a node (usually the leader) and SIGCONTs it later.
func (n *Nemesis) pause(ctx context.Context) {
	node, what := n.target(ctx, 0.7)
	if node == nil {
		return
	}
	d := n.pauseHold()
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	err := node.Pause()
	n.record(Pause, history.ActionStart, id, inv, fmt.Sprintf("SIGSTOP %s for %s", what, d.Round(time.Millisecond)), err)
	hold(ctx, d)
	inv = n.rec.Now()
	n.record(Pause, history.ActionStop, id, inv, "SIGCONT "+node.ID, node.Resume())
}

// partition cuts the Raft links in one of three shapes, then heals them.
func (n *Nemesis) partition(ctx context.Context) {
	ids := n.c.IDs()
	n.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var groups [][]string
	var shape string
	switch n.rng.Intn(3) {
	case 0:
		l, _, err := n.c.Leader(ctx)
		if err != nil {
			l = n.c.Node(ids[0])
		}
		var rest []string
		for _, id := range ids {
			if id != l.ID {
				rest = append(rest, id)
			}
		}
		groups, shape = [][]string{{l.ID}, rest}, "isolate leader "+l.ID
	case 1:
		minority := (len(ids) - 1) / 2
		groups, shape = [][]string{ids[:minority], ids[minority:]}, "majority/minority"
	default:
		// The first node sees both halves; the halves cannot see each other.
		half := (len(ids) - 1) / 2
		groups, shape = [][]string{ids[1 : 1+half], ids[1+half:]}, "bridge "+ids[0]
	}
	d := n.between(3*time.Second, 6*time.Second)
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	n.c.Mesh.Partition(groups...)
	n.record(Partition, history.ActionStart, id, inv, fmt.Sprintf("%s: %s for %s", shape, fmtGroups(groups), d.Round(time.Millisecond)), nil)
	hold(ctx, d)
	inv = n.rec.Now()
	n.c.Mesh.HealAll()
	n.record(Partition, history.ActionStop, id, inv, "healed", nil)
}

func fmtGroups(groups [][]string) string {
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = "{" + strings.Join(g, ",") + "}"
	}
	return strings.Join(parts, " ")
}

// clientPause asks the next lock holder to stop for longer than its TTL before writing. The
// worker records the pause itself, when it actually happens; here we wait for it to be over.
func (n *Nemesis) clientPause(stop <-chan struct{}) {
	d := 2*n.cfg.TTL + n.between(500*time.Millisecond, 1500*time.Millisecond)
	if n.wl.PauseHolder(d) {
		n.logf("%s requested: the next lock holder stops for %s", ClientPause, d.Round(time.Millisecond))
	}
	sleep(stop, d)
}

// churn transfers leadership a few times in a row.
func (n *Nemesis) churn(ctx context.Context) {
	id := n.rec.NewFaultID()
	count := 2 + n.rng.Intn(3)
	inv := n.rec.Now()
	n.record(Churn, history.ActionStart, id, inv, fmt.Sprintf("%d leadership transfers", count), nil)
	for i := 0; i < count && ctx.Err() == nil; i++ {
		inv = n.rec.Now()
		l, _, err := n.c.Leader(ctx)
		detail := "no leader to transfer from"
		if err == nil {
			var to string
			to, err = n.c.TransferLeadership(ctx, l, "")
			if to == "" && err == nil {
				to = n.newLeader(ctx, l.ID)
			}
			detail = fmt.Sprintf("transfer from %s to %s", l.ID, to)
		}
		n.record(Churn, history.ActionEvent, id, inv, detail, err)
		hold(ctx, n.between(700*time.Millisecond, 1500*time.Millisecond))
	}
	n.record(Churn, history.ActionStop, id, n.rec.Now(), "done", nil)
}

// clock waits for a lock under a lock-delay, then hands leadership to the node whose wall
// clock is furthest ahead of the leader's (or, when the leader's is, the next one behind it),
// so that a delay started under one clock is ended under another. It needs --clock-skew.
func (n *Nemesis) clock(ctx context.Context) {
	id := n.rec.NewFaultID()
	deadline := time.Now().Add(3 * n.cfg.TTL)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		l, _, err := n.c.Leader(ctx)
		if err != nil {
			hold(ctx, 50*time.Millisecond)
			continue
		}
		locks, err := n.c.Locks(ctx, l)
		delayed := ""
		for _, lk := range locks {
			if !lk.Held { // a listed lock that nobody holds is under a lock-delay
				delayed = lk.Name
				break
			}
		}
		if err != nil || delayed == "" {
			hold(ctx, 50*time.Millisecond)
			continue
		}
		var to *cluster.Node
		for _, node := range n.c.Nodes {
			if node != l && node.State() == cluster.Running &&
				(to == nil || n.c.ClockOffset(node.ID) > n.c.ClockOffset(to.ID)) {
				to = node
			}
		}
		if to == nil {
			n.logf("%s: no running node to hand leadership to", Clock)
			return
		}
		detail := fmt.Sprintf("%s under a lock-delay: transfer from %s (clock %v) to %s (clock %v)",
			delayed, l.ID, n.c.ClockOffset(l.ID), to.ID, n.c.ClockOffset(to.ID))
		n.record(Clock, history.ActionStart, id, n.rec.Now(), detail, nil)
		inv := n.rec.Now()
		_, err = n.c.TransferLeadership(ctx, l, to.ID)
		n.record(Clock, history.ActionStop, id, inv, "leader "+n.newLeader(ctx, l.ID), err)
		return
	}
	n.logf("%s: no lock-delay seen within %s", Clock, 3*n.cfg.TTL)
}
