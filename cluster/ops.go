package cluster

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// leaderOnly fails fast unless this node is the ready leader.
func (n *Node) leaderOnly() error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	return nil
}

// admit returns the term in which this node is the ready leader, for a request whose answer
// rests on that leadership (a renewal, a linearizable read): the confirmation must be of that
// term, not of whatever term is current when it runs. A node deposed and elected again while
// the request's goroutine stalled would otherwise acknowledge a renewal against the old term's
// timers, or answer a read before the new term's Barrier brought its state up to date.
func (n *Node) admit() (uint64, error) {
	term := n.readyTerm.Load()
	if term == 0 || n.raft.State() != raft.Leader || n.raft.CurrentTerm() != term {
		return 0, ErrNotLeader
	}
	if n.admitted != nil {
		n.admitted(term)
	}
	return term, nil
}

// CreateSession creates a session with a fresh random id and returns it as applied.
func (n *Node) CreateSession(ctx context.Context, name string, ttl, lockDelay time.Duration) (fsm.SessionInfo, error) {
	return n.CreateOwnedSession(ctx, "", name, ttl, lockDelay)
}

// CreateOwnedSession creates a session owned by the token with the accessor id owner ("" for
// none, without ACLs), with a fresh random id, and returns it as applied.
func (n *Node) CreateOwnedSession(ctx context.Context, owner, name string, ttl, lockDelay time.Duration) (fsm.SessionInfo, error) {
	if err := n.leaderOnly(); err != nil {
		return fsm.SessionInfo{}, err
	}
	for {
		var id fsm.SessionID
		if _, err := rand.Read(id[:]); err != nil {
			return fsm.SessionInfo{}, fmt.Errorf("cluster: session id: %w", err)
		}
		if id.IsZero() {
			continue
		}
		res, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeCreateSession, Session: id, Name: name, TTL: ttl, LockDelay: lockDelay, Owner: owner})
		if err != nil {
			return fsm.SessionInfo{}, err
		}
		if res.Status == fsm.StatusExists {
			continue // a 128-bit collision: draw again
		}
		return fsm.SessionInfo{ID: id, Name: name, TTL: ttl, LockDelay: lockDelay, CreateIndex: res.Index, Owner: owner}, nil
	}
}

// DestroySession ends a session and releases its locks (without lock-delay).
func (n *Node) DestroySession(ctx context.Context, id fsm.SessionID) ([]string, error) {
	if err := n.leaderOnly(); err != nil {
		return nil, err
	}
	res, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeDestroySession, Session: id})
	if err != nil {
		return nil, err
	}
	if res.Status == fsm.StatusSessionNotFound {
		return nil, ErrSessionNotFound
	}
	return res.Released, nil
}

// Renew restarts the session's lease at its full TTL. It answers only after a leadership
// confirmation that began after the renewal arrived, so a deposed leader cannot acknowledge it.
func (n *Node) Renew(ctx context.Context, id fsm.SessionID) (time.Duration, error) {
	res, err := n.RenewMany(ctx, []fsm.SessionID{id})
	if err != nil {
		return 0, err
	}
	switch res[0].Status {
	case RenewNotFound:
		return 0, ErrSessionNotFound
	case RenewUnknown:
		return 0, fmt.Errorf("%w: the session's expiry is being committed", ErrUnknownOutcome)
	}
	return res[0].TTL, nil
}

// RenewStatus is what a renewal found.
type RenewStatus uint8

const (
	// RenewOK: the lease restarted at the full TTL.
	RenewOK RenewStatus = iota
	// RenewNotFound: the session does not exist (it expired or was destroyed, or never did).
	RenewNotFound
	// RenewUnknown: the leader's timer fired and the expiry is being committed; if that
	// proposal fails, the next leader keeps the session, so neither answer would be true.
	RenewUnknown
)

// RenewResult is the outcome of one session's renewal.
type RenewResult struct {
	Status RenewStatus
	TTL    time.Duration // set with RenewOK
}

// RenewMany renews many sessions with one leadership confirmation, the way a client that keeps
// many sessions alive renews them in one request. The results are in the order of ids. Like
// Renew, it answers only after a confirmation that began after the renewals arrived; an error
// applies to all of them.
func (n *Node) RenewMany(ctx context.Context, ids []fsm.SessionID) ([]RenewResult, error) {
	// Taken before the leases restart: the confirmation rests on messages sent after it.
	arrived := time.Now()
	term, err := n.admit()
	if err != nil {
		return nil, err
	}
	res := make([]RenewResult, len(ids))
	if err := n.timers.renewMany(term, ids, res); err != nil {
		return nil, err
	}
	for i, id := range ids {
		if res[i].Status != RenewNotFound {
			continue
		}
		if _, ok := n.fsm.Session(id); ok {
			// No timer, yet in the state: the timer fired and the expiry is in flight.
			res[i].Status = RenewUnknown
		}
		// Not in the state: true only if this node still leads (a paused, deposed leader
		// would answer from a state that misses newer sessions), which the confirmation
		// below settles for every session at once.
	}
	if err := n.verify.confirm(ctx, arrived, term); err != nil {
		return nil, err
	}
	n.views.bump() // the leases' last renewals moved
	return res, nil
}

// AcquireRequest asks for a lock on behalf of a session.
type AcquireRequest struct {
	Session fsm.SessionID
	Lock    string
	// Value is stored with the grant when SetValue is true.
	Value    string
	SetValue bool
	// Wait, if positive, queues the session and waits up to this long for the grant.
	Wait time.Duration
	// Attempt, if set, names the client's try; the acquire is refused (StatusAttemptCancelled)
	// once the session cancelled it.
	Attempt Attempt
	// Limit makes the lock a semaphore of that many permits (2 to fsm.MaxLimit; 0 or 1 for a
	// lock), and Shared asks for a shared hold (fsm.FeatureSemaphoresRWLocks).
	Limit  uint32
	Shared bool
}

// Attempt names a client's try for a lock, one Lock call, all of whose requests carry it (see
// fsm.Command): the zero Attempt names none.
type Attempt struct {
	// ID is a try named by a string, as clients from before numbered attempts name them; a
	// session remembers only its last 16 cancelled ones.
	ID string
	// Seq is a numbered try (fsm.FeatureAttemptNumbers): a session numbers its tries from one
	// counter, and refuses any of a lock at or below the highest it saw end, never forgetting.
	Seq uint64
	// Floor says that every try of the session numbered below it has ended.
	Floor uint64
}

// set copies the attempt into c.
func (a Attempt) set(c *fsm.Command) {
	c.Attempt, c.AttemptSeq, c.AttemptFloor = a.ID, a.Seq, a.Floor
}

// CancelAcquire takes the session out of the lock's queue, for a client that gave up waiting
// and cannot tell whether a request of its still waits somewhere (a cut connection, a node that
// failed while it answered). The Result's Status is StatusCancelled or StatusNotQueued, or
// StatusOK with the token when the session holds the lock: a grant that came first is
// reported, never undone. StatusSessionNotFound when the session does not exist. An attempt
// also refuses the session's later acquires of the lock that carry it, so that a request of
// the cancelled try that is still on its way cannot queue or grant.
func (n *Node) CancelAcquire(ctx context.Context, session fsm.SessionID, lock string, attempt Attempt) (fsm.Result, error) {
	if err := n.leaderOnly(); err != nil {
		return fsm.Result{}, err
	}
	cmd := &fsm.Command{Type: fsm.TypeCancelWait, Session: session, Lock: lock}
	attempt.set(cmd)
	return n.propose(ctx, cmd)
}

// Acquire tries, or with a Wait queues for, a lock. The Result's Status says what happened:
// StatusOK with the token, StatusLockHeld or StatusLockDelayed when it could not be had (in
// time), StatusSessionNotFound when the session does not exist or ended while waiting. A
// blocking acquire's wait is a blockedAcquire (acquire_wait.go).
func (n *Node) Acquire(ctx context.Context, req AcquireRequest) (fsm.Result, error) {
	if err := n.leaderOnly(); err != nil {
		return fsm.Result{}, err
	}
	cmd := &fsm.Command{Type: fsm.TypeAcquire, Session: req.Session, Lock: req.Lock,
		Value: req.Value, SetValue: req.SetValue, Queue: req.Wait > 0, Limit: req.Limit, Shared: req.Shared}
	req.Attempt.set(cmd)
	if req.Wait <= 0 {
		return n.propose(ctx, cmd)
	}
	return n.registerWait(req).run(ctx, cmd)
}

// Release releases a lock held by the session under token; the first waiter, if any, is granted
// in the same command. An attempt is fenced too, held or not: the try that won the lock has
// ended, and its requests still in flight must not take it again.
func (n *Node) Release(ctx context.Context, session fsm.SessionID, lock string, token uint64, attempt Attempt) (fsm.Result, error) {
	if err := n.leaderOnly(); err != nil {
		return fsm.Result{}, err
	}
	cmd := &fsm.Command{Type: fsm.TypeRelease, Session: session, Lock: lock, Token: token}
	attempt.set(cmd)
	return n.propose(ctx, cmd)
}

// ForceRelease takes the lock's grant under token from its holder for an operator: the holding
// session ends, as a destroy ends it, and every lock it held stays unavailable for the
// session's TTL plus its lock-delay, on the leader's clock (fsm.TypeForceRelease), so that its
// client stops believing it holds them before anyone else is granted one. It answers
// StatusNotHolder when no grant of the lock has that token (or, if session is not zero, when
// that grant is not session's), and Released the locks the session held otherwise.
func (n *Node) ForceRelease(ctx context.Context, lock string, token uint64, session fsm.SessionID) (fsm.Result, error) {
	if err := n.leaderOnly(); err != nil {
		return fsm.Result{}, err
	}
	if feature := (&fsm.Command{Type: fsm.TypeForceRelease}).MissingFeature(n.fsm.FeatureEnabled); feature != "" {
		return fsm.Result{}, fmt.Errorf("%w: %q", ErrFeatureNotEnabled, feature)
	}
	// The holder is looked up in a state that holds every grant acknowledged before the call:
	// a node deposed without knowing it would miss a newer leader's grant under this token.
	if err := n.ReadBarrier(ctx); err != nil {
		return fsm.Result{}, err
	}
	var holder fsm.SessionID
	for _, h := range n.fsm.Holders(lock) {
		if h.Token == token {
			holder = h.Session
		}
	}
	if holder.IsZero() || !session.IsZero() && holder != session {
		return fsm.Result{Status: fsm.StatusNotHolder}, nil
	}
	return n.propose(ctx, &fsm.Command{Type: fsm.TypeForceRelease, Session: holder, Lock: lock, Token: token, Now: n.wallNow()})
}

// ReadBarrier makes the local state machine linearizable for a read that follows it: it
// confirms that this node still leads, with a majority of voters that accepted its term in
// messages sent after the call began (see ackTransport). So no newer leader had been elected
// when the call began, and none can have acknowledged a write this node's state lacks.
//
// Every write this leader acknowledged is in its state already: it became ready only once the
// Barrier of its term was applied by its state machine, and it acknowledges a write of its own
// term only after its state machine applied it. But a follower that serves linearizable reads
// (ReadIndex) may have applied an entry that this leader committed and has not applied yet,
// and a read here that begins after one there ends must see it too. So the read also waits
// until the state machine has applied up to the commit index taken when the call began, which
// is nearly always at once. (Raft's applied index would be the wrong thing to wait on: raft
// advances it when it hands entries to the state machine, not when they are applied.)
func (n *Node) ReadBarrier(ctx context.Context) error {
	arrived := time.Now()
	term, err := n.admit()
	if err != nil {
		return err
	}
	commit := n.raft.CommitIndex()
	if err := n.verify.confirm(ctx, arrived, term); err != nil {
		return err
	}
	if n.fsm.AppliedIndex() >= commit {
		return nil
	}
	return n.WaitApplied(ctx, n.visibleIndex(commit))
}

// WatchLock returns a channel closed at the next applied change of the named lock. Take it
// before reading the lock, then wait on it, so that no change falls in between.
func (n *Node) WatchLock(name string) <-chan struct{} { return n.events.watchLock(name) }

// WatchLocks returns a channel closed at the next applied change of any lock.
func (n *Node) WatchLocks() <-chan struct{} { return n.events.watchAny() }
