package client

import (
	"cmp"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// DefaultWaitChunk is how long one long-poll acquire of Mutex.Lock waits at most. Lock sends
// the next request shortly before a chunk elapses, so that the server always has a request of
// the session waiting and keeps its place in the queue; connection failures are noticed and
// retried at once regardless of the chunk.
const DefaultWaitChunk = time.Minute

// MutexOption configures a Mutex.
type MutexOption func(*Mutex)

// WithValue stores v with the lock while it is held (e.g. the holder's address).
func WithValue(v string) MutexOption {
	return func(m *Mutex) { m.value = &v }
}

// WithWaitChunk sets how long each long-poll acquire of Lock waits (default DefaultWaitChunk;
// the API allows up to 10m).
func WithWaitChunk(d time.Duration) MutexOption {
	return func(m *Mutex) { m.chunk = d }
}

// Mutex is a distributed FIFO lock held by a Session. A session holds a lock at most once: a
// second Mutex (or Election) of the session for the same lock is refused while the first
// tries for it or holds it, and goroutines that compete for a lock need one session each.
// Work done under the lock should stop when Context is done, and should pass Token to the
// protected resource.
//
// A hold ends with Unlock or with the session: once the session is lost (Session.Err is set),
// the Mutex forgets the hold before Session.Done closes, so Token is 0, Context is done and
// Lock and TryLock fail with the session's error.
//
// Every Lock or TryLock call is one attempt on the server (api.AcquireRequest.Attempt). An
// attempt that fails or is given up while a request of it may still reach the server is
// withdrawn in the background (DELETE /v1/locks/{name}/acquire with the attempt, and a release
// of a grant that came first), retrying while the session lives; Unlock releases with the
// attempt that won. The server then refuses every later request of the attempt, so that no
// request delayed in the network can queue the session or grant it the lock after the call
// that sent it has ended. The next Lock of the session on the same lock waits for those
// withdrawals.
type Mutex struct {
	s     *Session
	name  string
	value *string
	chunk time.Duration
	calls chan struct{} // one slot: Lock and TryLock calls run one at a time
	// limit makes every acquire one of a semaphore's permits (Semaphore); nil for a lock.
	limit *int

	mu    sync.Mutex
	hold  *hold  // nil while not held
	lost  *hold  // the last hold, if it ended without Unlock: Context and Unlock report it
	floor uint64 // the highest token of a hold that ended; a new grant must be above it
}

// hold is one grant of the lock to a Mutex.
type hold struct {
	token   uint64
	shared  bool    // a shared hold (RWMutex.RLock)
	attempt attempt // the attempt whose request won the grant
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stop    func() // unregisters the session loss hook
}

// NewMutex returns a Mutex for the lock name on session s. It does not contact the cluster.
func NewMutex(s *Session, name string, opts ...MutexOption) *Mutex {
	m := &Mutex{s: s, name: name, chunk: DefaultWaitChunk, calls: make(chan struct{}, 1)}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// Key returns the lock name.
func (m *Mutex) Key() string { return m.name }

// Session returns the session that holds (or will hold) the lock.
func (m *Mutex) Session() *Session { return m.s }

// Token returns the fencing token of the current hold, or 0 when not held, including as soon
// as the session's loss is known (Session.Err is set).
func (m *Mutex) Token() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.hold == nil || m.s.Err() != nil {
		return 0
	}
	return m.hold.token
}

// Context returns a context that is cancelled when the hold ends: on Unlock, or when the
// session is lost (context.Cause then matches ErrLockLost and the session's error), before
// Session.Done closes. When the Mutex is not held, the context is already cancelled.
func (m *Mutex) Context() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.hold != nil:
		return m.hold.ctx
	case m.lost != nil:
		return m.lost.ctx
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errorf("%w: mutex %q is not locked", ErrNotHolder, m.name))
	return ctx
}

// Lock blocks until the lock is granted, ctx is done or the session is lost. Waiters are
// granted in arrival order. It survives leader changes and node failures by asking again:
// the server keeps the session's place in the queue, and an acquire by the holder returns
// the same token, so a retried request never causes a second grant. If ctx ends, Lock
// returns at once and withdraws its attempt in the background (so that no request of it
// still on its way can be granted later, and a grant that came first is released). Lock
// returns at once if this Mutex already holds the lock, and fails with the session's error
// once the session is lost.
func (m *Mutex) Lock(ctx context.Context) error {
	return m.lock(ctx, true, false)
}

// TryLock takes the lock if it is free and fails at once otherwise, with an error that
// matches ErrLockHeld (or ErrLockDelayed) and, as an *APIError, names the holder.
func (m *Mutex) TryLock(ctx context.Context) error {
	return m.lock(ctx, false, false)
}

// lock takes the lock, waiting for it if wait is set, in the shared mode if shared is set.
func (m *Mutex) lock(ctx context.Context, wait, shared bool) error {
	select {
	case m.calls <- struct{}{}:
		defer func() { <-m.calls }()
	case <-ctx.Done():
		return errorf("lock %q: %w", m.name, context.Cause(ctx))
	}
	// The session first: a hold it lost is no hold.
	if err := m.s.Err(); err != nil {
		return errorf("lock %q: %w", m.name, err)
	}
	m.mu.Lock()
	h, value := m.hold, m.value
	m.mu.Unlock()
	if h != nil && h.shared != shared {
		return errorf("lock %q: %w: this RWMutex holds it %s", m.name, ErrModeMismatch, modeWord(h.shared))
	}
	if h != nil {
		return nil
	}
	if err := m.s.use(ctx, m.name, m); err != nil {
		return errorf("lock %q: %w", m.name, err)
	}
	// Every request of this call carries one attempt, which ends with the call.
	t := m.s.newAttempt(ctx)
	req := api.AcquireRequest{Session: m.s.ID(), Value: value, Limit: m.limit}
	if shared {
		req.Mode = api.ModeShared // a plain Mutex's requests stay as they were, for older servers
	}
	token, clean, err := m.try(ctx, req, t, wait)
	if err == nil {
		err = m.granted(token, t, shared)
		if err == nil {
			m.s.endAttempt(t) // its grant is the hold, which Unlock fences
			return nil
		}
	}
	switch {
	case m.s.Err() != nil:
		// The server drops the session's queue place and grants with the session; should
		// only this process have given it up, its keepalive stopped and it expires.
		m.s.endUse(m.name, m)
	case clean:
		// One request, answered without a grant: nothing of the attempt is left to withdraw.
		m.s.endAttempt(t)
		m.s.endUse(m.name, m)
	default:
		m.withdraw(t, token)
	}
	return err
}

// try runs one attempt: one acquire request, or with wait as many long polls as it takes.
// It returns the token granted; on failure, clean reports that the attempt sent a single
// request that the server answered without granting or queueing, so that it leaves nothing
// to withdraw.
func (m *Mutex) try(ctx context.Context, req api.AcquireRequest, t attempt, wait bool) (token uint64, clean bool, err error) {
	if wait {
		req.Wait = m.chunk.String()
	}
	a := &acquirer{m: m, req: req, t: t, wait: wait, results: make(chan acquireResult, 2)}
	a.ctx, a.cancel = context.WithCancel(ctx)
	defer a.cancel() // cuts off a request still waiting when Lock returns
	a.send()
	var overlap, retry <-chan time.Time
	if wait {
		defer a.overlap.Stop()
		overlap = a.overlap.C
	}
	for attempt := 0; ; {
		select {
		case <-overlap:
			switch a.inFlight {
			case 1:
				a.send()
			case 2: // the older request has not answered yet: send when it does
				a.overdue = true
			}
		case <-retry:
			retry = nil
			a.send()
		case <-ctx.Done():
			return 0, false, a.giveUp(ctx)
		case <-m.s.Done():
			return 0, false, a.giveUp(ctx)
		case r := <-a.results:
			a.inFlight--
			a.sends += r.sends
			if r.err == nil {
				a.drain()
				return r.resp.Token, false, nil
			}
			m.s.gone(r.err)
			if ctx.Err() != nil || m.s.Err() != nil {
				return 0, false, a.giveUp(ctx)
			}
			err := r.err
			if errors.Is(err, ErrFeatureNotEnabled) {
				if needsFeature(a.req) {
					// A limit or a shared mode: no request without it would do, and the server
					// already waited for a feature every member supports. The cluster does not
					// support this until every member is upgraded.
					a.drain()
					return 0, a.requests == 1 && a.sends == 1, errorf("lock %q: %w", m.name, err)
				}
				m.s.c.forgetFeatures() // asked again below: the cluster may not have applied it yet
			}
			elapsed := errors.Is(err, ErrLockHeld) || errors.Is(err, ErrLockDelayed) // a wait chunk
			if !wait && errors.Is(err, ErrAttemptCancelled) {
				// An earlier copy of this try, whose answer was lost, was refused for good
				// (the server ends a refused try's attempt; no other end of it can have come
				// while it runs): the lock was not to be had.
				err = errorf("%w: %w: an earlier request of this try was refused and its answer lost", ErrLockHeld, err)
			}
			if !wait || !elapsed && !isTransient(err) {
				a.drain()
				var ae *APIError
				clean := a.requests == 1 && a.sends == 1 && errors.As(err, &ae) && ae.StatusCode < 500
				return 0, clean, errorf("lock %q: %w", m.name, err)
			}
			if elapsed {
				attempt = 0
			} else {
				m.s.c.logger.Debug("acquire failed; asking again", "lock", m.name, "error", err)
			}
			switch {
			case a.inFlight > 0 && a.overdue:
				a.send()
			case a.inFlight > 0:
				// The other request still holds the session's place.
			case elapsed:
				a.send()
			default:
				retry = time.After(m.s.c.backoff(attempt))
				attempt++
			}
		}
	}
}

// needsFeature reports whether req uses what only a cluster with feature semaphores-rwlocks
// takes: a limit (an older version does not know the field at all) or a shared mode.
func needsFeature(req api.AcquireRequest) bool {
	return req.Limit != nil || req.Mode == api.ModeShared
}

// chunkLead is how long before a wait chunk elapses Lock sends the next one, so that the
// server always has a request of the session waiting and keeps its place in the queue.
func chunkLead(chunk time.Duration) time.Duration {
	return min(chunk/4, 10*time.Second)
}

// acquirer runs the acquire requests of one Lock call: one at a time, two while a wait chunk
// hands over to the next.
type acquirer struct {
	m        *Mutex
	req      api.AcquireRequest
	t        attempt
	wait     bool
	ctx      context.Context // ends every request when Lock returns
	cancel   context.CancelFunc
	results  chan acquireResult // one slot per request in flight, so none blocks
	inFlight int
	requests int         // acquire requests started
	sends    int         // of their HTTP attempts, those that may have reached a server
	overlap  *time.Timer // fires when the next wait chunk is due; nil without a wait
	overdue  bool        // the overlap came while two requests were in flight
}

// acquireResult is the answer to one acquire request.
type acquireResult struct {
	resp  *api.AcquireResponse
	sends int
	err   error
}

// send starts a request and times the next overlap from it.
func (a *acquirer) send() {
	a.inFlight++
	a.requests++
	a.overdue = false
	req := a.req
	a.m.s.onAcquire(&req, a.t) // with the session's floor as of now
	go func() {
		resp, out, err := a.m.acquire(a.ctx, req)
		a.results <- acquireResult{resp, out.sends, err}
	}()
	if !a.wait {
		return
	}
	due := a.m.chunk - chunkLead(a.m.chunk)
	if a.overlap == nil {
		a.overlap = time.NewTimer(due)
	} else {
		a.overlap.Reset(due)
	}
}

// drain cuts off the requests in flight and waits for their answers, so that none is still
// being sent when the attempt's outcome is decided.
func (a *acquirer) drain() {
	a.cancel()
	for ; a.inFlight > 0; a.inFlight-- {
		<-a.results
	}
}

// giveUp ends a Lock whose context ended or whose session was lost.
func (a *acquirer) giveUp(ctx context.Context) error {
	a.drain()
	m := a.m
	if err := m.s.Err(); err != nil {
		return errorf("lock %q: %w", m.name, err)
	}
	return errorf("lock %q: %w", m.name, context.Cause(ctx))
}

// acquire sends one (long-poll) acquire that is also cut short when the session is lost.
func (m *Mutex) acquire(ctx context.Context, req api.AcquireRequest) (*api.AcquireResponse, outcome, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.s.ctx, cancel)
	defer stop()
	return m.s.c.acquire(actx, m.name, req)
}

// granted records a grant, unless the session was lost meanwhile (then the lock cannot be
// trusted, and goes with the session) or the token is not above one of a hold that ended:
// that grant is an old hold the server still has, not this attempt's.
func (m *Mutex) granted(token uint64, t attempt, shared bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if token <= m.floor {
		return errorf("lock %q: %w: granted token %d is not above %d, the token of a hold that ended",
			m.name, ErrInternal, token, m.floor)
	}
	h := &hold{token: token, shared: shared, attempt: t}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	stop, ok := m.s.onLoss(func(reason error) { m.lose(h, reason) })
	if !ok {
		err := errorf("lock %q: granted as the session ended: %w", m.name, m.s.Err())
		h.cancel(err)
		return err
	}
	h.stop = stop
	m.hold, m.lost = h, nil
	return nil
}

// lose ends hold h, if it is still the current one, without a release: the session was lost,
// or (with the session alive) the lock was found held by someone else or under another token.
func (m *Mutex) lose(h *hold, reason error) bool {
	m.mu.Lock()
	if m.hold != h {
		m.mu.Unlock()
		return false
	}
	m.hold, m.lost = nil, h
	m.floor = max(m.floor, h.token)
	m.mu.Unlock()
	h.stop()
	h.cancel(errorf("%w: %q: %w", ErrLockLost, m.name, reason))
	return true
}

// current returns the hold, nil when not held or the session is lost.
func (m *Mutex) current() *hold {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.s.Err() != nil {
		return nil
	}
	return m.hold
}

func modeWord(shared bool) string {
	if shared {
		return "shared"
	}
	return "exclusively"
}

// highest returns the highest token this Mutex held.
func (m *Mutex) highest() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.floor
	if m.hold != nil {
		f = max(f, m.hold.token)
	}
	return f
}

// Unlock releases the lock, naming the attempt that won it so that the server refuses any
// request of that attempt still on its way. Context is cancelled first, so work under the
// lock stops before another holder can start. It returns an error matching ErrLockLost if
// the lock had already been lost (the work done under it may have overlapped with another
// holder's), and another error if the cluster could not be reached: the release then goes on
// in the background while the session lives (the lock is released when the session ends at
// the latest), and the session's next Lock of the lock waits for it.
func (m *Mutex) Unlock(ctx context.Context) error {
	return m.unlock(ctx, false)
}

// unlock is Unlock of a hold in the given mode; a hold (or lost hold) in the other mode is
// left as it is.
func (m *Mutex) unlock(ctx context.Context, shared bool) error {
	m.mu.Lock()
	h, lost := m.hold, m.lost
	if cur := cmp.Or(h, lost); cur != nil && cur.shared != shared {
		m.mu.Unlock()
		return errorf("unlock %q: %w: this RWMutex holds it %s", m.name, ErrNotHolder, modeWord(cur.shared))
	}
	m.hold, m.lost = nil, nil
	if h != nil {
		m.floor = max(m.floor, h.token)
	}
	m.mu.Unlock()
	if h == nil && lost == nil {
		return errorf("unlock %q: %w: mutex is not locked", m.name, ErrNotHolder)
	}
	if h == nil {
		// Lost before: if only this process gave the session up, the server may still hold
		// the lock for it; release it so that others need not wait for the expiry.
		_ = m.s.c.releaseAttempt(ctx, m.name, m.s.ID(), lost.token, m.s.fields(lost.attempt))
		return errorf("unlock %q: %w", m.name, context.Cause(lost.ctx))
	}
	h.stop()
	lostErr := m.s.Err() // the hold ended before Unlock: reported even if the release works
	h.cancel(errorf("mutex %q unlocked", m.name))
	// A proclamation's withdrawal first: once released, a request of it must find it fenced.
	err := m.s.settled(ctx, m.name)
	if err == nil {
		err = m.s.c.releaseAttempt(ctx, m.name, m.s.ID(), h.token, m.s.fields(h.attempt))
		m.s.gone(err)
	}
	switch {
	case lostErr != nil:
		m.s.endUse(m.name, m)
		return errorf("unlock %q: %w: %w", m.name, ErrLockLost, lostErr)
	case err == nil:
		m.s.endUse(m.name, m)
		return nil
	case errors.Is(err, ErrSessionNotFound):
		m.s.endUse(m.name, m)
		return errorf("unlock %q: %w: %w", m.name, ErrLockLost, err)
	case errors.Is(err, ErrNotHolder):
		// Someone released the lock with this session's id and token. The release fenced the
		// attempt; a request of it that slipped in before may have taken the lock anew.
		m.withdraw(h.attempt, 0)
		return errorf("unlock %q: %w: %w", m.name, ErrLockLost, err)
	}
	m.withdraw(h.attempt, h.token)
	return errorf("unlock %q: %w (releasing in the background while the session lives)", m.name, err)
}
