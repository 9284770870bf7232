package nemesis

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// restore saves a backup of the cluster's state through the leader, lets the workload go on
// (locks are taken and released, sessions made and ended after the backup), then restores it
// (with acl=keep, so the workers' tokens stay). The restore changes what live sessions hold
// without their clients asking: a cluster that does it safely ends every session and keeps
// every lock a client may still believe it holds from being granted until that belief has
// lapsed, which the belief and held-by-nobody checkers judge.
func (n *Nemesis) restore(ctx context.Context) {
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	leader, _, err := n.c.Leader(ctx)
	if err != nil {
		n.record(Restore, history.ActionStart, id, inv, "no leader to save a backup from", err)
		return
	}
	file, err := n.c.SaveBackup(ctx, leader)
	n.record(Restore, history.ActionStart, id, inv, fmt.Sprintf("saved a backup of %d bytes through %s", len(file), leader.ID), err)
	if err != nil {
		return
	}
	// Long enough for holds taken after the backup to be believed, and for some to end.
	hold(ctx, n.between(n.cfg.TTL, 3*n.cfg.TTL))
	inv = n.rec.Now()
	target, what := n.target(ctx, 0.5)
	if target == nil {
		n.record(Restore, history.ActionStop, id, inv, "no running node to restore through", fmt.Errorf("nemesis: no running node"))
		return
	}
	res, err := n.c.RestoreBackup(ctx, target, file)
	n.record(Restore, history.ActionStop, id, inv,
		fmt.Sprintf("restored it through %s: index %d, %d sessions, %d locks", what, res.Index, res.Sessions, res.Locks), err)
	// The cluster holds back what the restore changed for up to a TTL and a lock-delay.
	hold(ctx, n.cfg.TTL+time.Second)
}
