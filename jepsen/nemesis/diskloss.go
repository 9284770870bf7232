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

// RejoinRefusalLog is what an agent whose data directory was lost logs when it refuses to
// start under the id the cluster still counts (cluster.ErrAlreadyBootstrapped).
const RejoinRefusalLog = "has already been bootstrapped"

// exitRefused is the agent's exit status for a refusal a restart cannot cure (agent.ExitRefused;
// the harness talks to agents as processes and imports no server package).
const exitRefused = 4

// refusalWait bounds how long a node started on a wiped data dir may take to refuse.
const refusalWait = 15 * time.Second

// diskLoss loses one node's disk: it kills the node, deletes everything in its data dir and
// starts it again with its usual flags (--initial-cluster), as a supervisor does after a
// volume is replaced. The node must refuse to start under its old id — it forgot the log it
// acknowledged and the votes it gave — saying why, with the refusal's exit status; a node
// that serves again is recorded as an error, which fails the disk checker. Then the nemesis
// brings it back the documented way: it removes the member and starts the node with an empty
// data dir and --join, as a new member that the leader promotes once it has caught up.
func (n *Nemesis) diskLoss(ctx context.Context) {
	node, what := n.target(ctx, 0.3)
	if node == nil {
		return
	}
	id := n.rec.NewFaultID()
	inv := n.rec.Now()
	err := node.Kill(ctx)
	if err == nil {
		err = node.WipeData()
	}
	off := node.LogSize()
	if err == nil {
		err = node.Start()
	}
	n.record(DiskLoss, history.ActionStart, id, inv, "SIGKILL "+what+", data dir wiped, started again with its usual flags", err)
	if err == nil {
		n.expectRefusal(ctx, id, node, off)
	}
	inv = n.rec.Now()
	err = n.rejoin(ctx, node)
	n.record(DiskLoss, history.ActionStop, id, inv, "removed "+node.ID+", started with an empty data dir and --join", err)
}

// expectRefusal waits for a node started on a wiped data dir to stop, and checks that it
// stopped with the refusal's status and said why in its log (from byte off on). A node that
// still serves is stopped (and wiped again) after the error is recorded.
func (n *Nemesis) expectRefusal(ctx context.Context, id int, node *cluster.Node, off int64) {
	inv := n.rec.Now()
	line := stopLogLine(ctx, node, off, refusalWait, RejoinRefusalLog)
	var err error
	detail := node.ID + " refused: " + line
	switch code := node.ExitCode(); {
	case node.State() != cluster.Stopped:
		err = fmt.Errorf("%s serves again under its old id %s after its data dir was lost: a voter that forgot its votes", node.ID, refusalWait)
		detail = node.ID + " started"
		kctx, cancel := context.WithTimeout(ctx, restartWait)
		_ = node.Kill(kctx)
		cancel()
		_ = node.WipeData()
	case line == "" || code != exitRefused:
		err = fmt.Errorf("%s stopped with status %d without the refusal (%q) in its log", node.ID, code, RejoinRefusalLog)
		detail = node.ID + " stopped"
	}
	n.record(DiskLoss, history.ActionEvent, id, inv, detail, err)
}

// rejoin removes the stopped node from the cluster through another member and starts it
// with --join, then waits until it is a voter again.
func (n *Nemesis) rejoin(ctx context.Context, node *cluster.Node) error {
	wctx, cancel := context.WithTimeout(ctx, 2*restartWait)
	defer cancel()
	var others []string
	err := cluster.Poll(wctx, 200*time.Millisecond, func() error {
		others = nil
		var last error = errors.New("no other member runs")
		for _, o := range n.c.Nodes {
			if o == node || o.State() != cluster.Running {
				continue
			}
			others = append(others, o.HTTPAddr)
			if last != nil {
				last = n.c.RemoveMember(wctx, o, node.ID)
				if last != nil && strings.Contains(last.Error(), "not_found") {
					last = nil // removed already
				}
			}
		}
		return last
	})
	if err != nil {
		return fmt.Errorf("remove %s: %w", node.ID, err)
	}
	if err := node.WipeData(); err != nil {
		return err
	}
	if err := node.StartJoining(others, n.c.AgentToken()); err != nil {
		return err
	}
	// A voter again in its own view and in the leader's: its own configuration can name it a
	// voter from before its removal while it catches up.
	return n.waitSuffrage(wctx, node, "voter")
}
