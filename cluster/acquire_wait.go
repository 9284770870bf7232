package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// A blocking acquire's life, in one place: a blockedAcquire from its registration to its
// answer.
//
//   - Wait: it registers its mailbox with the notifier before it proposes, so that a grant
//     applied at any point after is seen; if an earlier request of the same session and lock
//     is still taking the queue entry away, it proposes only once that has ended
//     (grantWait.ready), so that the removal cannot take away the entry its acquire keeps.
//   - Wake: the notifier (notify.go, observe) puts the session's grants of the lock in the
//     mailbox, and ends the wait when the session ends, its queue entry is dropped (its token
//     was deleted), the state is replaced by a restore, or the node closes.
//   - Withdraw: a wait that ends without its grant (time up, the caller gone, a proposal that
//     failed, a restore) unregisters; the last request of the session to leave the lock's
//     wait removes the session's queue entry with a cancel-wait, unless leadership moved while
//     it waited (a newer request may own the entry through another leader).
//   - Report: only a grant under a token above the index of the acquire that queued the
//     session is its grant (an older one may have been released meanwhile), and such a grant
//     is reported even when it won a race with the end of the wait; otherwise the answer says
//     why there was no grant, as of the cancel-wait when there was one.
//
// Invariants: a request that proposed an acquire, or that was left the queue entry by an
// earlier request, leaves no queue entry behind unless another request of the session owns it
// or leadership moved (the outcome is then ErrUnknownOutcome); a grant is never lost.

// waitKey names one session's wait for one lock.
type waitKey struct {
	lock    string
	session fsm.SessionID
}

// grantWait is a blocked acquire's mailbox: it receives the token of its grant, or is told that
// its session ended.
type grantWait struct {
	key     waitKey
	granted chan uint64   // buffered 1
	ended   chan struct{} // closed when the session ends, its queue entry is dropped, or the node closes
	// ready, when not nil, is closed once an earlier request of the same session and lock has
	// finished taking the queue entry away (see leave); the acquire is proposed after it.
	ready <-chan struct{}
}

// blockedAcquire is one blocking acquire (AcquireRequest.Wait > 0), from its registration to
// its answer.
type blockedAcquire struct {
	n    *Node
	req  AcquireRequest
	mail *grantWait
	term uint64 // the term when it registered
	// queued is the index of the acquire that queued the session; 0 until then.
	queued uint64
}

// registerWait registers a blocking acquire of req, before its acquire is proposed.
func (n *Node) registerWait(req AcquireRequest) *blockedAcquire {
	mail := n.events.waitGrant(req.Lock, req.Session)
	return &blockedAcquire{n: n, req: req, mail: mail, term: n.raft.CurrentTerm()}
}

// run proposes cmd, the acquire, and waits for its grant, withdrawing when the wait ends
// without it.
func (b *blockedAcquire) run(ctx context.Context, cmd *fsm.Command) (fsm.Result, error) {
	if b.mail.ready != nil {
		select {
		case <-b.mail.ready:
		case <-ctx.Done():
			// This request proposed nothing, but an earlier one of the session may have left
			// the queue entry to it: withdraw as any request whose wait ends.
			_, _ = b.withdraw()
			return fsm.Result{}, fmt.Errorf("cluster: waiting for an earlier wait of the session to end: %w", ctx.Err())
		}
	}
	res, err := b.n.propose(ctx, cmd)
	if err != nil || res.Status != fsm.StatusQueued {
		if err == nil && res.Status == fsm.StatusOK {
			b.done()
		} else {
			_, _ = b.withdraw()
		}
		return res, err
	}
	b.queued = res.Index
	timer := time.NewTimer(b.req.Wait)
	defer timer.Stop()
	for {
		select {
		case token := <-b.mail.granted:
			if g, ok := b.wake(token); ok {
				b.done()
				return g, nil
			}
			continue
		case <-b.mail.ended:
			if _, ok := b.n.fsm.Session(b.req.Session); !ok {
				b.done()
				return fsm.Result{Status: fsm.StatusSessionNotFound}, nil
			}
			// The state was replaced (snapshot restore), the queue entry was dropped (its
			// token was deleted) or the node is closing: settle it below.
		case <-timer.C:
		case <-ctx.Done():
		}
		return b.withdraw()
	}
}

// wake answers a grant of the lock to the session under token: the grant, if it is this
// request's.
func (b *blockedAcquire) wake(token uint64) (fsm.Result, bool) {
	// Only a grant after this request queued the session is its grant: an older one
	// (released meanwhile) would make the caller believe it holds a lock it does not.
	if token > b.queued {
		return b.grantResult(token), true
	}
	return b.grantAfter(b.queued)
}

// done unregisters the wait, which ended with an answer that leaves the queue as it is.
func (b *blockedAcquire) done() { b.n.events.cancel(b.mail) }

// withdraw ends a wait that was not granted, or that failed before or while proposing
// (queued is then 0). A grant to the session under a token above queued that raced with the
// end is reported as the grant. Otherwise the last request of the session to leave the lock's
// wait removes the session's queue entry — also one that proposed nothing, since an earlier
// request may have left the entry to it — and the result says why there was no grant.
func (b *blockedAcquire) withdraw() (fsm.Result, error) {
	n, req := b.n, b.req
	removed := n.events.leave(b.mail)
	if removed != nil {
		defer removed()
	}
	if b.queued > 0 {
		if g, ok := b.grantAfter(b.queued); ok {
			return g, nil
		}
	}
	if removed == nil || !n.fsm.Queued(req.Lock, req.Session) {
		// Another request of this session waits for this lock and owns the entry, or there is
		// no entry to remove.
		return b.lockState(0), nil
	}
	if n.raft.CurrentTerm() != b.term || !n.IsLeader() {
		// Leadership moved while this request waited, even if it came back: a newer request of
		// the session may have queued it again through another leader, which this node's
		// waiters do not show, and the entry would be that request's. Leave it, as when the
		// removal fails.
		return fsm.Result{}, fmt.Errorf("%w: leadership changed while waiting; the queue entry was left in place", ErrUnknownOutcome)
	}
	return b.cancelWait()
}

// cancelWait removes the session from the lock's queue after its wait ended. A grant that won
// the race is reported as a grant, never lost.
func (b *blockedAcquire) cancelWait() (fsm.Result, error) {
	n, req := b.n, b.req
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
	defer cancel()
	res, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeCancelWait, Session: req.Session, Lock: req.Lock})
	if err != nil {
		// The queue entry stays until the session asks again, is granted or ends; the caller
		// learns the outcome is unknown.
		// Not %w: the cause may be ErrNotLeader, but the acquire itself was applied, so the
		// only true classification is "unknown".
		return fsm.Result{}, fmt.Errorf("%w: wait ended but the queue entry could not be removed: %v", ErrUnknownOutcome, err)
	}
	switch res.Status {
	case fsm.StatusOK, fsm.StatusSessionNotFound:
		return res, nil
	case fsm.StatusCancelled:
		// Why, as of the cancel: the state read later may have moved on (a lock-delay that
		// ended since, with nobody left in the queue, reads as free).
		if !res.Holder.IsZero() {
			return fsm.Result{Status: fsm.StatusLockHeld, Index: res.Index, Holder: res.Holder, Token: res.Token}, nil
		}
		if res.DelayUntil != 0 {
			return fsm.Result{Status: fsm.StatusLockDelayed, Index: res.Index, DelayUntil: res.DelayUntil}, nil
		}
	}
	return b.lockState(res.Index), nil
}

// grantAfter returns the session's grant of the lock if it holds it under a token above index.
func (b *blockedAcquire) grantAfter(index uint64) (fsm.Result, bool) {
	h, ok := b.n.fsm.HoldOf(b.req.Lock, b.req.Session)
	if !ok || h.Token <= index {
		return fsm.Result{}, false
	}
	return fsm.Result{Status: fsm.StatusOK, Index: h.Token, Token: h.Token, Value: h.Value}, true
}

// grantResult reports the grant under token, with the value it holds now.
func (b *blockedAcquire) grantResult(token uint64) fsm.Result {
	req := b.req
	value := ""
	if req.SetValue {
		value = req.Value
	}
	if h, ok := b.n.fsm.HoldOf(req.Lock, req.Session); ok && h.Token == token {
		value = h.Value
	}
	return fsm.Result{Status: fsm.StatusOK, Index: token, Token: token, Value: value}
}

// lockState describes why a wait for the lock ended without a grant to the session: held by
// another session (the newest grant of one), or delayed.
func (b *blockedAcquire) lockState(index uint64) fsm.Result {
	n, req := b.n, b.req
	l := n.fsm.Lock(req.Lock)
	if l.Held && l.Holder != req.Session {
		return fsm.Result{Status: fsm.StatusLockHeld, Index: index, Holder: l.Holder, Token: l.Token}
	}
	if l.Held {
		hs := n.fsm.Holders(req.Lock)
		for i := len(hs) - 1; i >= 0; i-- {
			if hs[i].Session != req.Session {
				return fsm.Result{Status: fsm.StatusLockHeld, Index: index, Holder: hs[i].Session, Token: hs[i].Token}
			}
		}
	}
	if !l.Held && l.DelayUntil != 0 {
		return fsm.Result{Status: fsm.StatusLockDelayed, Index: index, DelayUntil: l.DelayUntil}
	}
	// Free and undelayed, or held by the session under a grant older than this request's (a
	// grant-and-release race, or a leftover request): not this request's grant, and no other
	// session to name.
	return fsm.Result{Status: fsm.StatusLockHeld, Index: index}
}

// waitGrant registers a mailbox for session's grant of lock. Register before proposing the
// acquire, so that a grant applied between the proposal and the wait is not missed.
func (nt *notifier) waitGrant(lock string, session fsm.SessionID) *grantWait {
	w := &grantWait{key: waitKey{lock, session}, granted: make(chan uint64, 1), ended: make(chan struct{})}
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.closed {
		close(w.ended)
		return w
	}
	addTo(nt.grants, w.key, w)
	addTo(nt.bySession, session, w)
	if ch, ok := nt.removing[w.key]; ok {
		w.ready = ch
	}
	return w
}

// cancel unregisters w.
func (nt *notifier) cancel(w *grantWait) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	removeFrom(nt.grants, w.key, w)
	removeFrom(nt.bySession, w.key.session, w)
}

// leave unregisters w, whose wait ended without a grant, and says who owns the queue entry.
// If another blocked acquire waits for the same session and lock (a client that re-asked
// before its previous request ended), that one does: leave returns nil, and w's end must not
// remove the entry. Otherwise the caller removes it and calls the returned function once the
// removal has ended; requests of the same session and lock that register meanwhile propose
// their acquire only after that (grantWait.ready), so the removal cannot take away the entry
// their acquire kept. Of requests that end together, exactly the last to leave removes.
func (nt *notifier) leave(w *grantWait) (removed func()) {
	nt.mu.Lock()
	defer nt.mu.Unlock()
	removeFrom(nt.grants, w.key, w)
	removeFrom(nt.bySession, w.key.session, w)
	if len(nt.grants[w.key]) > 0 {
		return nil
	}
	ch, ok := nt.removing[w.key]
	if !ok {
		ch = make(chan struct{})
		nt.removing[w.key] = ch
	}
	return func() {
		nt.mu.Lock()
		defer nt.mu.Unlock()
		if nt.removing[w.key] == ch {
			delete(nt.removing, w.key)
			close(ch)
		}
	}
}
