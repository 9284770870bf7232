package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// observeWait is how long one blocking query of Observe waits before asking again.
const observeWait = time.Minute

// Election elects one leader among the candidates that campaign on the same name. It is a
// Mutex whose value is the leader's announcement (e.g. its address): Campaign blocks until
// this candidate leads, and anyone can read or observe who leads.
//
// A leadership ends with Resign or with the session. Once the session is lost, Token is 0,
// IsLeader is false and Context is done before Session.Done closes, and Campaign fails with
// the session's error: campaign again on a new session (as `raftlock elect` does). A
// leadership lost while the session lives (its lock released with the session's id and token
// by someone else) is noticed by Proclaim, which then fails with an error matching both
// ErrNotLeader and ErrLockLost and forgets the leadership (Context done, Token 0), as etcd's
// Election.Proclaim fails with ErrElectionNotLeader; Campaign then campaigns anew. Nothing
// else watches the lock for such a release: Observe shows who leads.
type Election struct {
	s    *Session
	name string

	mu sync.Mutex
	m  *Mutex // the campaign that won, nil before the first
}

// NewElection returns an Election on the lock name for session s.
func NewElection(s *Session, name string) *Election {
	return &Election{s: s, name: name}
}

// Key returns the election's lock name.
func (e *Election) Key() string { return e.name }

// Session returns the candidate's session.
func (e *Election) Session() *Session { return e.s }

func (e *Election) current() *Mutex {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.m
}

// IsLeader reports whether this candidate currently believes it leads.
func (e *Election) IsLeader() bool {
	m := e.current()
	return m != nil && m.current() != nil
}

// Token returns the fencing token of the leadership, or 0 when not leading (including as soon
// as the session's loss is known).
func (e *Election) Token() uint64 {
	if m := e.current(); m != nil {
		return m.Token()
	}
	return 0
}

// Context returns a context cancelled when the leadership ends (resigned, lost with the
// session, or found lost by Proclaim). While not leading it is already cancelled.
func (e *Election) Context() context.Context {
	if m := e.current(); m != nil {
		return m.Context()
	}
	return (&Mutex{name: e.name}).Context()
}

// Campaign blocks until this candidate leads with value, ctx is done or the session is lost
// (it then fails with the session's error). Candidates are elected in the order they started
// campaigning. A leader that campaigns again proclaims the new value.
func (e *Election) Campaign(ctx context.Context, value string) error {
	if e.IsLeader() {
		return e.Proclaim(ctx, value)
	}
	m := NewMutex(e.s, e.name, WithValue(value))
	if prev := e.current(); prev != nil {
		m.floor = prev.highest() // a new leadership's token is above every earlier one's
	}
	if err := m.Lock(ctx); err != nil {
		return errorf("campaign: %w", err)
	}
	e.mu.Lock()
	e.m = m
	e.mu.Unlock()
	return nil
}

// Proclaim replaces the leader's value without giving up leadership. It fails with
// ErrNotLeader when this candidate does not lead, and with an error matching ErrNotLeader and
// ErrLockLost when it finds that the leadership was lost (the leadership then ends: see
// Election).
func (e *Election) Proclaim(ctx context.Context, value string) error {
	m := e.current()
	var h *hold
	if m != nil {
		h = m.current()
	}
	if h == nil {
		return errorf("proclaim on %q: %w", e.name, ErrNotLeader)
	}
	t := e.s.newAttempt(ctx)
	req := api.AcquireRequest{Session: e.s.ID(), Value: &value}
	e.s.onAcquire(&req, t)
	resp, out, err := e.s.c.acquire(ctx, e.name, req)
	var answered *APIError
	if out.sends != 1 || err != nil && (!errors.As(err, &answered) || answered.StatusCode >= 500) {
		// A request of this proclamation may still be on its way, and applied after the
		// leadership ended it would grant the lock anew to this session, which would never
		// learn of it: cancel the attempt, and give back a grant other than the leadership's.
		m.runWithdrawalLater(t, h.token)
	} else {
		e.s.endAttempt(t)
	}
	if err != nil {
		e.s.gone(err)
		// attempt_cancelled: an earlier request of this proclamation, whose answer was lost,
		// was refused for good (the server ends a refused try's attempt), as one refused
		// lock_held is.
		if errors.Is(err, ErrLockHeld) || errors.Is(err, ErrLockDelayed) || errors.Is(err, ErrAttemptCancelled) {
			return e.lost(m, h, err)
		}
		return errorf("proclaim on %q: %w", e.name, err)
	}
	if resp.Token != h.token {
		// The leadership was lost and this acquire won a new one: give it back, since the
		// caller's work under the old token has been interrupted.
		return e.lost(m, h, errorf("the lock was granted anew under token %d", resp.Token))
	}
	m.mu.Lock()
	if m.hold == h {
		m.value = &value
	}
	m.mu.Unlock()
	return nil
}

// lost ends leadership h, which Proclaim found lost while the session lives, and withdraws its
// attempt: a request of the campaign still on its way must not queue the session again, and a
// grant the session got anew is given back.
func (e *Election) lost(m *Mutex, h *hold, cause error) error {
	err := errorf("proclaim on %q: %w: %w: %w", e.name, ErrNotLeader, ErrLockLost, cause)
	if m.lose(h, errorf("leadership lost while the session lives: %w", cause)) {
		m.withdraw(h.attempt, 0)
	}
	return err
}

// Resign gives up leadership, so that the next candidate is elected. It is a no-op when this
// candidate does not lead.
func (e *Election) Resign(ctx context.Context) error {
	m := e.current()
	if m == nil {
		return nil
	}
	err := m.Unlock(ctx)
	if err != nil && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrNotHolder) {
		return errorf("resign: %w", err)
	}
	return nil
}

// Leader returns the current leader's lock state (session, token, value); ErrElectionNoLeader
// when nobody leads.
func (e *Election) Leader(ctx context.Context) (*api.Lock, error) {
	l, err := e.s.c.GetLock(ctx, e.name)
	if err != nil {
		return nil, err
	}
	if !l.Held {
		return nil, errorf("%q: %w", e.name, ErrElectionNoLeader)
	}
	return l, nil
}

// Observe returns a channel of leader changes and vacancies; see Client.Observe.
func (e *Election) Observe(ctx context.Context) <-chan api.Lock {
	return e.s.c.Observe(ctx, e.name)
}

// Observe reports the leaders of the election (the holders of lock name) as they change:
// first the state as it stands, then each new leader or new value, and each vacancy — a lock
// with Held false, when the leader resigned or was lost and nobody took its place in the same
// command. It holds one streamed watch of the lock (WatchPrefix), on any node, so that every
// change is seen at once, in order; against a cluster without streams it uses blocking queries,
// where a leader that comes and goes between two of them may not be seen. The channel is closed
// when ctx is done. Observing needs no session.
func (c *Client) Observe(ctx context.Context, name string) <-chan api.Lock {
	ch := make(chan api.Lock)
	go func() {
		defer close(ch)
		var last *api.Lock
		emit := func(l api.Lock) bool {
			if last != nil && sameLeader(*last, l) {
				return true
			}
			select {
			case ch <- l:
				last = &l
				return true
			case <-ctx.Done():
				return false
			}
		}
		send := func(ev WatchEvent) bool {
			switch {
			case ev.Err != nil:
				return true // the watch ends; the blocking queries take over below
			case ev.Resync:
				l := api.Lock{Name: name} // a lock not listed is free
				for _, x := range ev.Locks {
					if x.Name == name {
						l = x
					}
				}
				return emit(l)
			case ev.Lock.Name == name: // the prefix is the name: longer names come too
				return emit(ev.Lock)
			}
			return true
		}
		if _, err := c.followStream(ctx, []string{name}, 0, readOptions{}, send); err == nil || ctx.Err() != nil {
			return
		}
		c.observeByBlockingQuery(ctx, name, emit)
	}()
	return ch
}

// observeByBlockingQuery is Observe by blocking queries of the lock, one after the other.
func (c *Client) observeByBlockingQuery(ctx context.Context, name string, emit func(api.Lock) bool) {
	var index uint64
	for attempt := 0; ctx.Err() == nil; {
		l, err := c.watchLock(ctx, name, index, observeWait, nil)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.logger.Debug("observe failed; asking again", "lock", name, "error", err)
			if !sleepCtx(ctx, c.backoff(attempt)) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		// A lock never taken has modify_index 0; index 1 then waits for its first change.
		index = max(l.ModifyIndex, 1)
		if !emit(*l) {
			return
		}
	}
}

// sameLeader reports whether two states of an election show the same leader with the same
// value, or both a vacancy.
func sameLeader(a, b api.Lock) bool {
	if !a.Held || !b.Held {
		return a.Held == b.Held
	}
	return a.Session == b.Session && a.Token == b.Token && a.Value == b.Value
}
