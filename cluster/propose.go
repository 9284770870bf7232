package cluster

import (
	"context"
	"fmt"

	"github.com/raftlock/raftlock/fsm"
)

// propose submits c to the log and waits for its result. It fails with ErrNotLeader when the
// command was certainly not applied and with ErrUnknownOutcome when it may have been; ctx
// ending while the command is in flight is an unknown outcome too.
func (n *Node) propose(ctx context.Context, c *fsm.Command) (fsm.Result, error) {
	if n.closed.Load() {
		return fsm.Result{}, fmt.Errorf("%w: %w", ErrNotLeader, ErrShutdown)
	}
	if err := ctx.Err(); err != nil {
		// The request ended (its client left, or it waited too long): proposing it now would
		// apply a command nobody waits for, such as an acquire whose client already gave up.
		return fsm.Result{}, fmt.Errorf("%w: the request ended before it was proposed: %w", ErrNotProposed, context.Cause(ctx))
	}
	if err := n.gateCommand(ctx, c); err != nil {
		return fsm.Result{}, err
	}
	if !n.proposals.TryRLock() {
		return fsm.Result{}, fmt.Errorf("%w: a restore is being installed", ErrNotLeader)
	}
	f := n.raft.Apply(c.Encode(nil), n.cfg.ApplyTimeout)
	n.proposals.RUnlock()
	switch done, err := await(ctx, f); {
	case !done:
		return fsm.Result{}, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	case err != nil:
		return fsm.Result{}, applyError(err)
	}
	res, ok := f.Response().(fsm.Result)
	if !ok {
		return fsm.Result{}, fmt.Errorf("cluster: unexpected apply response %T", f.Response())
	}
	if res.Err != nil {
		return res, fmt.Errorf("cluster: command refused by the state machine: %w", res.Err)
	}
	return res, nil
}

// Observe implements fsm.Observer: it wakes waiters, moves the leader's timers and counts.
func (n *Node) Observe(events []fsm.Event) {
	n.events.observe(events)
	n.changes.observe(events)
	n.timers.observe(events)
	n.stats.observe(events)
	n.gate.observe(events)
	n.views.observe(events)
	n.snapshotOnFeatures(events)
}
