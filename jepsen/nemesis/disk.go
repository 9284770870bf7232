package nemesis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
)

// StorageFailureLog is what an agent logs when a write to its Raft log or stable store fails
// and it stops (the agent's log line says it, with the error).
const StorageFailureLog = "stopping this node at once"

// diskStopWait bounds how long a node whose disk fails may take to stop.
const diskStopWait = 10 * time.Second

// diskEIO makes one node's fsyncs fail with EIO: the node must stop, saying why in its log,
// while the others go on. Then, as an operator who replaced the disk and rebooted the machine
// would, the nemesis cuts its power (what the failed fsyncs were to make durable is lost), heals
// the disk and starts the node again.
func (n *Nemesis) diskEIO(ctx context.Context) {
	node, what := n.target(ctx, 0.5)
	if node == nil || node.Disk == nil {
		return
	}
	id := n.rec.NewFaultID()
	off := node.LogSize()
	inv := n.rec.Now()
	node.Disk.FailFsync(true)
	n.record(DiskEIO, history.ActionStart, id, inv, "fsync fails with EIO on "+what, nil)
	n.expectStop(ctx, DiskEIO, id, node, off, true)
	inv = n.rec.Now()
	rep, err := node.PowerCut(ctx)
	node.Disk.Heal()
	errs := []error{err}
	if err == nil {
		errs = append(errs, n.restartNode(ctx, node))
	}
	n.record(DiskEIO, history.ActionStop, id, inv, fmt.Sprintf("disk replaced, power cycled (%s), %s restarted", rep, node.ID), errors.Join(errs...))
}

// diskFull makes one node's disk full for a few seconds: writes that need new space, creates
// and fallocate fail with ENOSPC. The node may go on (raft-wal writes into space it allocated
// beforehand) or stop; if it stops it must say why. Then the disk has room again and a stopped
// node is started.
func (n *Nemesis) diskFull(ctx context.Context) {
	node, what := n.target(ctx, 0.5)
	if node == nil || node.Disk == nil {
		return
	}
	id := n.rec.NewFaultID()
	off := node.LogSize()
	d := n.between(3*time.Second, 6*time.Second)
	inv := n.rec.Now()
	node.Disk.NoSpace(true)
	n.record(DiskFull, history.ActionStart, id, inv, fmt.Sprintf("disk of %s full for %s", what, d.Round(time.Millisecond)), nil)
	hold(ctx, d)
	n.expectStop(ctx, DiskFull, id, node, off, false)
	inv = n.rec.Now()
	node.Disk.Heal()
	var err error
	detail := "disk has room again"
	if node.State() == cluster.Stopped {
		err = n.restartNode(ctx, node)
		detail += ", " + node.ID + " restarted"
	}
	n.record(DiskFull, history.ActionStop, id, inv, detail, err)
}

// diskSlow makes the leader's fsyncs take 100–500 ms each for a few seconds.
func (n *Nemesis) diskSlow(ctx context.Context) {
	node, what := n.target(ctx, 1)
	if node == nil || node.Disk == nil {
		return
	}
	id := n.rec.NewFaultID()
	d := n.between(3*time.Second, 8*time.Second)
	inv := n.rec.Now()
	node.Disk.SlowFsync(100*time.Millisecond, 500*time.Millisecond)
	n.record(DiskSlow, history.ActionStart, id, inv, fmt.Sprintf("fsync of %s takes 100-500ms for %s", what, d.Round(time.Millisecond)), nil)
	hold(ctx, d)
	inv = n.rec.Now()
	node.Disk.Heal()
	n.record(DiskSlow, history.ActionStop, id, inv, "fsync of "+node.ID+" fast again", nil)
}

// expectStop waits for a node whose disk fails to stop and checks that its log (from byte off
// on) says why. With must set, a node that goes on is an error; otherwise it is reported. The
// outcome is recorded as an event of the fault: an error there fails the disk checker.
func (n *Nemesis) expectStop(ctx context.Context, fault string, id int, node *cluster.Node, off int64, must bool) {
	inv := n.rec.Now()
	wait := diskStopWait
	if !must {
		wait = 0
	}
	line := stopLogLine(ctx, node, off, wait, StorageFailureLog)
	var err error
	detail := node.ID + " stopped: " + line
	switch {
	case node.State() != cluster.Stopped && must:
		err = fmt.Errorf("%s still running %s after its disk began to fail", node.ID, wait)
		detail = node.ID + " went on"
	case node.State() != cluster.Stopped:
		detail = node.ID + " went on: it needed no new space"
	case line == "":
		err = fmt.Errorf("%s stopped without saying in its log that its storage failed", node.ID)
		detail = node.ID + " stopped"
	}
	n.record(fault, history.ActionEvent, id, inv, detail, err)
}

// restartNode starts a stopped node and waits until it serves.
func (n *Nemesis) restartNode(ctx context.Context, node *cluster.Node) error {
	if err := node.Start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, restartWait)
	defer cancel()
	return n.c.WaitHealthy(wctx, node)
}
