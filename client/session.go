package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// DefaultSessionTTL is the TTL of a session created without WithTTL.
const DefaultSessionTTL = 15 * time.Second

// SessionOption configures a Session.
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	ttl       time.Duration
	name      string
	lockDelay time.Duration
	margin    time.Duration
	onDanger  func(remaining time.Duration)
}

// WithTTL sets the session TTL (the server accepts 2s to 24h; default 15s).
func WithTTL(ttl time.Duration) SessionOption {
	return func(o *sessionOptions) { o.ttl = ttl }
}

// WithSessionName gives the session a human name shown by operators' tools.
func WithSessionName(name string) SessionOption {
	return func(o *sessionOptions) { o.name = name }
}

// WithLockDelay keeps the session's locks unavailable for d after the session expires, for
// resources that cannot check fencing tokens.
func WithLockDelay(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.lockDelay = d }
}

// WithSafetyMargin sets how long before "last acknowledged renewal sent + TTL" the session
// gives up its locks locally (default TTL/5; zero or less means the default; it must be less
// than TTL/2). It must cover clock-rate differences and the time the program needs to stop
// working under the lock; see Session.SafetyMargin for the arithmetic.
func WithSafetyMargin(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.margin = d }
}

// WithOnDanger calls fn, once per episode, when renewals have failed for half the TTL: the
// session may soon be lost (Chubby's jeopardy). remaining is the time left until the local
// deadline. fn runs on its own goroutine.
func WithOnDanger(fn func(remaining time.Duration)) SessionOption {
	return func(o *sessionOptions) { o.onDanger = fn }
}

// Session is a lease on the cluster, renewed in the background about every TTL/3. Its locks
// live and die with it. It keeps a conservative local deadline: the moment the last
// acknowledged renewal was sent, plus the TTL, minus a safety margin, on the monotonic clock.
// The server frees the session's locks no earlier than TTL after it received that renewal, so
// Done closes before anyone else can be granted them (unless this process is paused at that
// very moment, which is what fencing tokens are for).
type Session struct {
	c        *Client
	info     api.Session
	ttl      time.Duration
	margin   time.Duration
	onDanger func(time.Duration)

	ctx    context.Context // cancelled, with the reason as cause, when the session is lost
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	lastAck time.Time // send time of the last acknowledged renewal (or of the create)
	err     error     // why the session was lost: set before the loss hooks run and Done closes
	hooks   map[uint64]func(error)
	hookSeq uint64
	uses    map[string]*lockUse // lock names its Mutexes try for, hold or withdraw from
	changed chan struct{}       // closed and replaced when uses change or the session is lost
	// attempts numbers the tries of the session's Mutexes and Elections.
	attempts attempts

	stopOnce sync.Once
	stop     chan struct{}
	loopDone chan struct{}
}

// NewSession creates a session and starts keeping it alive. Close it when done.
func (c *Client) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: DefaultSessionTTL}
	for _, opt := range opts {
		opt(&o)
	}
	if o.margin <= 0 {
		o.margin = o.ttl / 5
	}
	if o.ttl <= 0 || o.margin >= o.ttl/2 {
		return nil, errorf("%w: session ttl %s with safety margin %s", ErrInvalidArgument, o.ttl, o.margin)
	}
	req := api.CreateSessionRequest{TTL: o.ttl.String(), Name: o.name}
	if o.lockDelay > 0 {
		req.LockDelay = o.lockDelay.String()
	}
	sent := time.Now()
	info, err := c.createSession(ctx, req)
	if err != nil {
		return nil, errorf("creating session: %w", err)
	}
	// Should the server report a shorter TTL than asked, the local deadline follows it.
	if ttl, err := time.ParseDuration(info.TTL); err == nil && ttl > 0 && ttl < o.ttl {
		o.margin = o.margin * ttl / o.ttl
		o.ttl = ttl
	}
	s := &Session{
		c: c, info: *info, ttl: o.ttl, margin: o.margin, onDanger: o.onDanger,
		lastAck: sent, stop: make(chan struct{}), loopDone: make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	// Learn now, not in the middle of a Lock, whether the cluster numbers attempts.
	c.supports(ctx, featureAttemptNumbers)
	go s.keepAlive()
	return s, nil
}

// ID returns the session id, the capability to use the session.
func (s *Session) ID() string { return s.info.ID }

// TTL returns the session TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Client returns the client the session uses.
func (s *Session) Client() *Client { return s.c }

// Done is closed when the session is lost or closed; Err then says why. By then every Mutex
// and Election of the session has forgotten its hold: Token is 0, Context is done, and Lock,
// TryLock and Campaign fail with Err.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Context returns a context that is cancelled when Done closes; its cause is Err.
func (s *Session) Context() context.Context { return s.ctx }

// Err returns nil while the session is alive; then an error matching ErrSessionNotFound (the
// server reported it gone; the message says whether it was destroyed or may have expired),
// ErrSessionDeadline (the local deadline passed without a renewal) or ErrSessionClosed.
// It is set as soon as the loss is known, before the session's holds are forgotten and Done
// closes.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// SafetyMargin returns how long before the server could end the session this client stops
// believing in it: the loss hooks run and Done closes at the local deadline, the send time of
// the last acknowledged renewal + TTL − SafetyMargin, on this process's monotonic clock.
//
// Why that is early enough. Let S be the moment the client sent its last acknowledged renewal
// (taken before the renewal joins its batch, so no later than any request the server saw)
// and A ≥ S its arrival at the leader. The leader restarts the session's timer at the full
// TTL at A, and acknowledges only after a majority of voters accepted its term in messages
// sent after A, so a deposed leader cannot acknowledge a renewal; a leader elected later
// restarts every timer at the full TTL once it has applied its term's barrier, after A. The
// session (and with it its locks) therefore ends no earlier than A + TTL ≥ S + TTL, measured
// by the leader's monotonic clock, and its locks are granted to others only by a log entry
// committed after that. With ρ the largest rate error of the client's and the servers'
// clocks (within 100 ppm for a quartz crystal, 500 ppm under NTP), the local deadline comes
// at least SafetyMargin − 2·ρ·TTL before the earliest end, so the margin must be at least
// 2·ρ·TTL plus the time the holder needs to stop acting on the lock; the default, TTL/5,
// leaves all but 0.1 % for that. Clock offsets do not matter (each side measures durations on
// its own clock) and network delay only makes the bound more conservative. The time to stop
// includes the deadline timer firing late (scheduling, GC pauses), the hooks, and the work
// under the lock ending (the CLI's --grace must fit in it). A process paused for longer than
// that is what fencing tokens are for. docs/safety.md gives the whole argument.
func (s *Session) SafetyMargin() time.Duration { return s.margin }

// Deadline returns the local deadline: the session is considered lost from then on unless a
// renewal sent before it is acknowledged.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadlineLocked()
}

func (s *Session) deadlineLocked() time.Time { return s.lastAck.Add(s.ttl - s.margin) }

// Close stops the keepalive and destroys the session on the server, which releases its locks.
// Done closes first, so that work under the session's locks stops before they are released.
// A session the server no longer knows is not an error.
func (s *Session) Close(ctx context.Context) error {
	s.lose(ErrSessionClosed)
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.loopDone
	_, err := s.c.destroySession(ctx, s.info.ID)
	if err != nil && !errors.Is(err, ErrSessionNotFound) {
		return errorf("destroying session %s: %w", s.info.ID, err)
	}
	return nil
}

// lose marks the session lost for reason; only the first reason counts. Err is set first,
// then the loss hooks run (the session's Mutexes forget their holds), and only then Done
// closes, so that whoever wakes up on Done finds nothing that still claims to hold.
func (s *Session) lose(reason error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = reason
	hooks := make([]uint64, 0, len(s.hooks))
	for id := range s.hooks {
		hooks = append(hooks, id)
	}
	slices.Sort(hooks)
	fns := make([]func(error), len(hooks))
	for i, id := range hooks {
		fns[i] = s.hooks[id]
	}
	s.hooks = nil
	s.notifyLocked()
	s.mu.Unlock()
	for _, fn := range fns {
		fn(reason)
	}
	s.cancel(reason)
}

// onLoss registers fn to run, with the reason, when the session is lost, before Done closes;
// fn must not block. It reports false, registering nothing, if the session is already lost.
// stop unregisters fn.
func (s *Session) onLoss(fn func(error)) (stop func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, false
	}
	if s.hooks == nil {
		s.hooks = make(map[uint64]func(error))
	}
	s.hookSeq++
	id := s.hookSeq
	s.hooks[id] = fn
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.hooks, id)
	}, true
}

// gone marks the session lost if err says the server no longer knows it: a lost session is
// never revived, so the loss is known as soon as any request learns it.
func (s *Session) gone(err error) {
	if errors.Is(err, ErrSessionNotFound) {
		s.lose(s.ended(err))
	}
}

// ended is the reason of the session's loss once the server answered that it does not know the
// session (answer). The server ends a session when it expires or is destroyed, and answers
// alike after both; but before the local deadline the session cannot have expired (see
// SafetyMargin), so an answer read before it means that the session was destroyed.
func (s *Session) ended(answer error) error {
	return &sessionEndedError{id: s.info.ID, left: time.Until(s.Deadline()), answer: answer}
}

// sessionEndedError is Session.Err once the server reported the session gone. It matches
// ErrSessionNotFound, and says whether the session was destroyed or may have expired.
type sessionEndedError struct {
	id     string
	left   time.Duration // time left before the local deadline when the answer was read
	answer error         // the server's answer
}

// Error implements error.
func (e *sessionEndedError) Error() string { return errPrefix + e.text() }

func (e *sessionEndedError) text() string {
	if e.left > 0 {
		return fmt.Sprintf("session %s was destroyed (the server no longer knows it, and it could not "+
			"have expired for at least another %s)", e.id, e.left.Round(time.Millisecond))
	}
	return fmt.Sprintf("session %s ended on the server: it expired or was destroyed", e.id)
}

// Unwrap returns the server's answer.
func (e *sessionEndedError) Unwrap() error { return e.answer }

// lockUse is how the Mutexes of a session share one lock name. The server keeps one queue
// place and one grant per session and lock, whatever the attempt: a withdrawal of a Lock that
// gave up (which takes the session out of the queue and releases a late grant) would undo the
// place or the grant of a newer try. So at most one Mutex tries for or holds the lock at a
// time, and a new try starts only once every withdrawal of earlier ones has ended.
type lockUse struct {
	m       *Mutex // the Mutex trying for or holding the lock; nil when none
	pending int    // withdrawals still running
}

// notifyLocked wakes those waiting for a change of uses or for the loss.
func (s *Session) notifyLocked() {
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
}

// changedLocked returns the channel notifyLocked closes next.
func (s *Session) changedLocked() chan struct{} {
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// use makes m the session's user of lock name, once the withdrawals of earlier tries have
// ended. It fails if another Mutex of the session uses the lock, or the session is lost.
func (s *Session) use(ctx context.Context, name string, m *Mutex) error {
	for {
		s.mu.Lock()
		if err := s.err; err != nil {
			s.mu.Unlock()
			return err
		}
		if s.uses == nil {
			s.uses = make(map[string]*lockUse)
		}
		u := s.uses[name]
		if u == nil {
			u = &lockUse{}
			s.uses[name] = u
		}
		if u.m != nil && u.m != m {
			s.mu.Unlock()
			return errorf("%w: another Mutex or Election of session %s uses lock %q (a session holds a lock at most once)",
				ErrInvalidArgument, s.info.ID, name)
		}
		if u.pending == 0 {
			u.m = m
			s.mu.Unlock()
			return nil
		}
		changed := s.changedLocked()
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return errorf("waiting for an earlier try's withdrawal: %w", context.Cause(ctx))
		}
	}
}

// settled waits until no withdrawal from lock name is running, or the session is lost.
func (s *Session) settled(ctx context.Context, name string) error {
	for {
		s.mu.Lock()
		u := s.uses[name]
		if s.err != nil || u == nil || u.pending == 0 {
			s.mu.Unlock()
			return nil
		}
		changed := s.changedLocked()
		s.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
}

// endUse ends m's use of lock name.
func (s *Session) endUse(name string, m *Mutex) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.uses[name]; u != nil && u.m == m {
		u.m = nil
		s.idleLocked(name, u)
	}
}

// startWithdrawal records a withdrawal from lock name: the session's new tries for it wait
// until the returned func is called.
func (s *Session) startWithdrawal(name string) (done func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uses == nil {
		s.uses = make(map[string]*lockUse)
	}
	u := s.uses[name]
	if u == nil {
		u = &lockUse{}
		s.uses[name] = u
	}
	u.pending++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			u.pending--
			s.idleLocked(name, u)
		})
	}
}

// idleLocked forgets u once nothing uses it, and wakes the tries waiting for it.
func (s *Session) idleLocked(name string, u *lockUse) {
	if u.m == nil && u.pending == 0 && s.uses[name] == u {
		delete(s.uses, name)
	}
	s.notifyLocked()
}

type renewResult struct {
	sent time.Time
	err  error
}

// keepAlive renews the session until it is lost or closed.
func (s *Session) keepAlive() {
	defer close(s.loopDone)
	s.mu.Lock()
	deadline := s.deadlineLocked()
	last := s.lastAck
	s.mu.Unlock()
	deadlineT := time.NewTimer(time.Until(deadline))
	dangerT := time.NewTimer(time.Until(last.Add(s.ttl / 2)))
	renewT := time.NewTimer(time.Until(last.Add(s.ttl / 3)))
	defer deadlineT.Stop()
	defer dangerT.Stop()
	defer renewT.Stop()
	results := make(chan renewResult, 1)
	inflight := false
	for {
		select {
		case <-s.stop:
			return
		case <-s.ctx.Done():
			return
		case <-deadlineT.C:
			s.c.logger.Warn("session deadline passed without renewal", "session", s.info.ID)
			s.lose(errorf("%w: session %s may have expired on the server (ttl %s, safety margin %s)",
				ErrSessionDeadline, s.info.ID, s.ttl, s.margin))
			return
		case <-dangerT.C:
			if s.onDanger != nil {
				go s.onDanger(time.Until(s.Deadline()))
			}
		case <-renewT.C:
			if inflight {
				continue
			}
			inflight = true
			go s.renew(s.Deadline(), results)
		case r := <-results:
			inflight = false
			if r.err == nil {
				s.mu.Lock()
				if r.sent.After(s.lastAck) {
					s.lastAck = r.sent
				}
				last = s.lastAck
				deadline = s.deadlineLocked()
				s.mu.Unlock()
				deadlineT.Reset(time.Until(deadline))
				dangerT.Reset(time.Until(last.Add(s.ttl / 2)))
				renewT.Reset(time.Until(last.Add(s.ttl / 3)))
				continue
			}
			if errors.Is(r.err, ErrSessionNotFound) {
				reason := s.ended(r.err)
				s.c.logger.Warn("session ended on the server", "session", s.info.ID, "reason", textOf(reason))
				s.lose(reason)
				return
			}
			s.c.logger.Debug("session renewal failed", "session", s.info.ID, "error", r.err)
			renewT.Reset(s.retryDelay())
		}
	}
}

// renew sends one renewal, giving up at the local deadline (after it, an answer is useless).
// It goes out with the client's other sessions' renewals (see renewer); sent is taken before
// it joins its batch, so the local deadline can only be earlier than the server's.
func (s *Session) renew(deadline time.Time, results chan<- renewResult) {
	ctx, cancel := context.WithDeadline(s.ctx, deadline)
	defer cancel()
	sent := time.Now()
	// Short attempts: a node that does not answer within TTL/6 is left for another one.
	err := s.c.renewer.renew(ctx, s.info.ID, max(s.ttl/6, 200*time.Millisecond))
	results <- renewResult{sent: sent, err: err}
}

// retryDelay is the pause before asking again after a failed renewal: short, since the
// local deadline is running, and jittered.
func (s *Session) retryDelay() time.Duration {
	d := max(s.ttl/20, 50*time.Millisecond)
	return d/2 + rand.N(d/2+1)
}
