package cluster

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// monitorLeadership follows leadership changes: on gaining it, it waits for a Barrier (so the
// state machine holds every entry of earlier terms), then arms the session and delay timers and
// publishes this node's metadata; on losing it, it drops the timers at once.
func (n *Node) monitorLeadership() {
	defer n.wg.Done()
	var cancel context.CancelFunc
	done := make(chan struct{})
	close(done)
	for {
		select {
		case <-n.stop:
			if cancel != nil {
				cancel()
			}
			<-done
			return
		case leading := <-n.leaderCh:
			if cancel != nil {
				cancel()
				cancel = nil
				<-done
			}
			n.readyTerm.Store(0)
			n.timers.deactivate()
			if !leading {
				n.changes.wakeAll(false) // linearizable watches waiting here must fail, not wait on
			}
			if leading {
				var ctx context.Context
				ctx, cancel = context.WithCancel(context.Background())
				done = make(chan struct{})
				go func() {
					defer close(done)
					n.establishLeadership(ctx)
				}()
			}
		}
	}
}

// establishLeadership makes this node serve as the leader of the term it won: once that term's
// Barrier is applied (so the state machine holds every entry of earlier terms), it arms the
// timers for the term and marks the node ready in it. A node deposed and elected again before
// this ran serves nothing of the old term: IsLeader compares the ready term with raft's, and
// the next term gets its own Barrier and timers when its leadership event arrives.
func (n *Node) establishLeadership(ctx context.Context) {
	term := n.raft.CurrentTerm()
	for {
		// Raft may never answer this barrier: with BatchApplyCh it sits in a buffer that raft
		// drops, unanswered, when it shuts down. Wait on ctx too, which Close cancels.
		done, err := await(ctx, n.raft.Barrier(n.cfg.ApplyTimeout))
		if !done {
			return
		}
		if err == nil {
			break
		}
		n.log.Warn("barrier after gaining leadership failed", "error", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	if ctx.Err() != nil || n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return // deposed meanwhile: the events that follow start over
	}
	n.timers.activate(term)
	n.readyTerm.Store(term)
	n.log.Info("leading", "term", term, "applied_index", n.raft.AppliedIndex())
	n.publishSelf(ctx)
	n.pruneMembers(ctx)
	n.gate.poke()
}

// publishSelf records this leader's own addresses in the log if they are missing or stale, so
// that followers can forward to it.
func (n *Node) publishSelf(ctx context.Context) {
	me := fsm.Member{ID: n.cfg.ID, RaftAddr: string(n.trans.LocalAddr()), HTTPAddr: n.cfg.AdvertiseHTTP}
	if have, ok := n.fsm.Member(me.ID); ok && have == me {
		return
	}
	if _, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeSetMember, Member: me}); err != nil {
		n.log.Warn("could not publish own address", "error", err)
	}
}

// expireSession proposes the expiry of a session whose timer, armed in term, ran out. It
// proposes nothing unless this node still leads in that term with that term's timers: a timer
// or retry of an earlier leadership must not expire a session that a leader in between renewed.
func (n *Node) expireSession(id fsm.SessionID, term uint64) {
	if !n.leadsIn(term) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout*2)
	defer cancel()
	cmd := &fsm.Command{Type: fsm.TypeExpireSession, Session: id, Now: n.wallNow()}
	if n.fsm.FeatureEnabled(fsm.FeatureExpiryTerm) {
		// Checking leadsIn(term) and proposing are not one step: should this node lose and
		// regain leadership in between, raft would append the command in the later term,
		// whose timers have not run out. The state machine drops it then.
		cmd.Term = term
	}
	res, err := n.propose(ctx, cmd)
	switch {
	case err == nil && res.Status == fsm.StatusOK:
		n.log.Debug("session expired", "session", id, "released", len(res.Released))
	case err == nil && res.Status == fsm.StatusStaleTerm:
		n.log.Debug("session expiry of an earlier term dropped", "session", id, "term", term)
	case err == nil:
		// Already gone (destroyed meanwhile): nothing to do.
	case errors.Is(err, ErrNotLeader) && !n.IsLeader():
		// The next leader restarts the timer at the full TTL.
	default:
		n.log.Warn("session expiry not committed; will retry", "session", id, "error", err)
		if _, ok := n.fsm.Session(id); ok {
			n.timers.retryExpiry(id, term)
		}
	}
}

// leadsIn reports whether this node is the ready leader of term with that term's timers.
func (n *Node) leadsIn(term uint64) bool {
	return n.readyTerm.Load() == term && n.IsLeader() && n.timers.current(term)
}

// wallNow is the wall-clock reading, in Unix nanoseconds, that this node writes into commands.
func (n *Node) wallNow() int64 { return time.Now().Add(n.cfg.ClockOffset).UnixNano() }

// wallUntil returns how long this node's wall clock takes to reach until (Unix ns), or 0.
func (n *Node) wallUntil(until int64) time.Duration {
	return max(time.Duration(until-n.wallNow()), 0)
}

// DelayLeft estimates how long the lock-delay of name, which the state says lasts until the
// wall-clock time until, keeps the lock unavailable: on the leader, until its timer proposes the
// delay's end.
func (n *Node) DelayLeft(name string, until int64) time.Duration {
	if left, ok := n.timers.delayLeft(name); ok {
		return left
	}
	return n.wallUntil(until)
}

// endDelay proposes the end of the lock-delay that lasts until the wall-clock time until, once
// this leader's timer has run for the whole delay. The command carries this node's clock reading,
// or until if that is later: the delay has lasted its full length on the monotonic clock, and a
// wall clock behind the one that started it must not make it last longer. It names the delay
// (a semaphore or a shared lock may have several), unless the delay is from before that was
// possible, when it is its lock's only one.
func (n *Node) endDelay(key delayKey, until int64, term uint64) {
	if !n.leadsIn(term) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout*2)
	defer cancel()
	_, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeDelayEnded, Lock: key.name, Now: max(n.wallNow(), until), DelayIndex: key.index})
	// Without an error the delay ended; with one, it may still be in force.
	if left, ok := n.fsm.Delay(key.name, key.index); err != nil && ok && left == until {
		n.timers.rearmDelay(key, until, term)
	}
}

// serveQueue proposes ServeQueue commands for the lock while its queue is ready (a command
// freed it for several waiters, and grants one per command: see fsm.TypeServeQueue) and this
// node leads in term: one for each waiter that fits, together, so that they commit in one
// round. It stops when the queue is served or leadership is lost (the next leader serves
// what is left); a failed proposal is tried again after a pause.
func (n *Node) serveQueue(name string, term uint64) {
	for n.leadsIn(term) {
		ready := min(n.fsm.Ready(name), maxServeBatch)
		if ready == 0 {
			return
		}
		errs := make(chan error, ready)
		for range ready {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout*2)
				defer cancel()
				_, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeServeQueue, Lock: name})
				errs <- err
			}()
		}
		var failed error
		for range ready {
			if err := <-errs; err != nil {
				failed = err
			}
		}
		if failed != nil {
			n.log.Warn("serving a lock's queue failed; will retry", "lock", name, "error", failed)
			time.Sleep(expiryRetry)
		}
	}
}

// maxServeBatch bounds the ServeQueue commands of one lock in flight at once.
const maxServeBatch = 64
