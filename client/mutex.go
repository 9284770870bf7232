package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
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

// Mutex is a distributed FIFO lock held by a Session. A session holds a lock at most once:
// goroutines that compete for a lock need one session each. Work done under the lock should
// stop when Context is done, and should pass Token to the protected resource.
type Mutex struct {
	s     *Session
	name  string
	value *string
	chunk time.Duration

	mu         sync.Mutex
	token      uint64 // 0 while not held
	holdCtx    context.Context
	holdCancel context.CancelCauseFunc
	stopWatch  func() bool
}

// NewMutex returns a Mutex for the lock name on session s. It does not contact the cluster.
func NewMutex(s *Session, name string, opts ...MutexOption) *Mutex {
	m := &Mutex{s: s, name: name, chunk: DefaultWaitChunk}
	for _, opt := range opts {
		opt(m)
	}
	return m
}

// Key returns the lock name.
func (m *Mutex) Key() string { return m.name }

// Session returns the session that holds (or will hold) the lock.
func (m *Mutex) Session() *Session { return m.s }

// Token returns the fencing token of the current hold, or 0 when not held.
func (m *Mutex) Token() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.token
}

// Context returns a context that is cancelled when the hold ends: on Unlock, or when the
// session is lost (context.Cause then matches ErrLockLost and the session's error). When the
// Mutex is not held, the context is already cancelled.
func (m *Mutex) Context() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holdCtx == nil {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(fmt.Errorf("%w: mutex %q is not locked", ErrNotHolder, m.name))
		return ctx
	}
	return m.holdCtx
}

// Lock blocks until the lock is granted, ctx is done or the session is lost. Waiters are
// granted in arrival order. It survives leader changes and node failures by asking again:
// the server keeps the session's place in the queue, and an acquire by the holder returns
// the same token, so a retried request never causes a second grant. If ctx ends, Lock
// cancels its try on the server (so that no request of it still on its way can be granted
// later) and releases a grant that came first. Lock returns at once if this Mutex already
// holds the lock.
func (m *Mutex) Lock(ctx context.Context) error {
	return m.lock(ctx, true)
}

// TryLock takes the lock if it is free and fails at once otherwise, with an error that
// matches ErrLockHeld (or ErrLockDelayed) and, as an *APIError, names the holder.
func (m *Mutex) TryLock(ctx context.Context) error {
	return m.lock(ctx, false)
}

func (m *Mutex) lock(ctx context.Context, wait bool) error {
	m.mu.Lock()
	held, value := m.token != 0, m.value
	m.mu.Unlock()
	if held {
		return nil
	}
	if err := m.s.Err(); err != nil {
		return fmt.Errorf("raftlock: lock %q: %w", m.name, err)
	}
	// Every request of this call carries one attempt, which giveUp cancels.
	req := api.AcquireRequest{Session: m.s.ID(), Value: value, Attempt: rand.Text()}
	if wait {
		req.Wait = m.chunk.String()
	}
	a := &acquirer{m: m, req: req, wait: wait, results: make(chan acquireResult, 2)}
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
			return a.giveUp(ctx)
		case <-m.s.Done():
			return a.giveUp(ctx)
		case r := <-a.results:
			a.inFlight--
			if r.err == nil {
				return m.granted(r.resp.Token)
			}
			if ctx.Err() != nil || m.s.Err() != nil {
				return a.giveUp(ctx)
			}
			err := r.err
			elapsed := errors.Is(err, ErrLockHeld) || errors.Is(err, ErrLockDelayed) // a wait chunk
			if !wait || errors.Is(err, ErrSessionNotFound) || !elapsed && !isTransient(err) {
				return fmt.Errorf("raftlock: lock %q: %w", m.name, err)
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
	wait     bool
	ctx      context.Context // ends every request when Lock returns
	cancel   context.CancelFunc
	results  chan acquireResult // one slot per request in flight, so none blocks
	inFlight int
	overlap  *time.Timer // fires when the next wait chunk is due; nil without a wait
	overdue  bool        // the overlap came while two requests were in flight
}

// acquireResult is the answer to one acquire request.
type acquireResult struct {
	resp *api.AcquireResponse
	err  error
}

// send starts a request and times the next overlap from it.
func (a *acquirer) send() {
	a.inFlight++
	a.overdue = false
	go func() {
		resp, err := a.m.acquire(a.ctx, a.req)
		a.results <- acquireResult{resp, err}
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
// being granted when Lock looks at what they left behind.
func (a *acquirer) drain() {
	a.cancel()
	for ; a.inFlight > 0; a.inFlight-- {
		<-a.results
	}
}

// giveUp ends a Lock whose context ended or whose session was lost: it waits for the requests
// in flight and, if the session lives on, takes it out of the queue (abandon).
func (a *acquirer) giveUp(ctx context.Context) error {
	a.drain()
	m := a.m
	if ctx.Err() != nil {
		m.abandon(a.req.Attempt)
		return fmt.Errorf("raftlock: lock %q: %w", m.name, context.Cause(ctx))
	}
	return fmt.Errorf("raftlock: lock %q: %w", m.name, m.s.Err())
}

// acquire sends one (long-poll) acquire that is also cut short when the session is lost.
func (m *Mutex) acquire(ctx context.Context, req api.AcquireRequest) (*api.AcquireResponse, error) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.s.ctx, cancel)
	defer stop()
	return m.s.c.acquireAttempt(actx, m.name, req)
}

// acquireAttempt sends an acquire that carries an attempt, or, to a server from before
// attempts, one without: such a server refuses the field, and asking without it loses only
// the attempt's protection.
func (c *Client) acquireAttempt(ctx context.Context, name string, req api.AcquireRequest) (*api.AcquireResponse, error) {
	if c.noAttempts.Load() {
		req.Attempt = ""
	}
	resp, err := c.Acquire(ctx, name, req)
	if req.Attempt != "" && refusesAttempts(err) {
		c.noAttempts.Store(true)
		req.Attempt = ""
		resp, err = c.Acquire(ctx, name, req)
	}
	return resp, err
}

// refusesAttempts reports whether err is the answer of a server from before attempts to an
// acquire that carries one: 400, the field unknown.
func refusesAttempts(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == api.CodeInvalidArgument &&
		strings.Contains(ae.Message, `unknown field "attempt"`)
}

// granted records a grant, unless the session was lost meanwhile: then the lock cannot be
// trusted (and goes with the session).
func (m *Mutex) granted(token uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.s.Err(); err != nil {
		return fmt.Errorf("raftlock: lock %q: granted as the session ended: %w", m.name, err)
	}
	m.token = token
	m.holdCtx, m.holdCancel = context.WithCancelCause(context.Background())
	cancel, s, name := m.holdCancel, m.s, m.name
	m.stopWatch = context.AfterFunc(s.ctx, func() {
		cancel(fmt.Errorf("%w: %q: %w", ErrLockLost, name, s.Err()))
	})
	return nil
}

// abandon cleans up after a Lock given up while a request may have queued the session or been
// granted: it cancels the attempt, which takes the session out of the queue and refuses the
// attempt's requests still on their way, and releases the lock if a grant came first. Reading
// the lock is not enough: a request the server still holds (its connection cut without the
// server noticing, or its node failed after replicating the queue entry), or one that reaches
// the server only now, can be granted later, leaving the lock held by a session whose Mutex
// never learns of it.
func (m *Mutex) abandon(attempt string) {
	if m.s.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.s.c.requestTimeout)
	defer cancel()
	var token uint64
	r, err := m.s.c.CancelAcquire(ctx, m.name, m.s.ID(), attempt)
	switch {
	case err == nil:
		if !r.Held {
			return
		}
		token = r.Token
	case isUnsupported(err):
		// A server without the endpoint: release a grant already made, at least.
		l, err := m.s.c.GetLock(ctx, m.name)
		if err != nil || !l.Held || l.Session != m.s.ID() {
			return
		}
		token = l.Token
	default:
		m.s.c.logger.Warn("could not leave the queue of a lock after Lock gave up; the session may "+
			"be granted it later", "lock", m.name, "error", err)
		return
	}
	if err := m.s.c.Release(ctx, m.name, m.s.ID(), token); err != nil {
		m.s.c.logger.Warn("could not release a lock granted after Lock gave up", "lock", m.name,
			"error", err)
	}
}

// Unlock releases the lock. Context is cancelled first, so work under the lock stops before
// another holder can start. It returns an error matching ErrLockLost if the lock had already
// been lost (the work done under it may have overlapped with another holder's), and another
// error if the cluster could not be reached; the lock is then released when the session ends.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	token, cancel, stopWatch := m.token, m.holdCancel, m.stopWatch
	m.token, m.holdCtx, m.holdCancel, m.stopWatch = 0, nil, nil, nil
	m.mu.Unlock()
	if token == 0 {
		return fmt.Errorf("raftlock: unlock %q: %w: mutex is not locked", m.name, ErrNotHolder)
	}
	stopWatch()
	lost := m.s.Err() // the hold ended before Unlock: reported even if the release works
	cancel(fmt.Errorf("raftlock: mutex %q unlocked", m.name))
	err := m.s.c.Release(ctx, m.name, m.s.ID(), token)
	if lost != nil && err == nil {
		return fmt.Errorf("raftlock: unlock %q: %w: %w", m.name, ErrLockLost, lost)
	}
	if errors.Is(err, ErrNotHolder) || errors.Is(err, ErrSessionNotFound) {
		return fmt.Errorf("raftlock: unlock %q: %w: %w", m.name, ErrLockLost, err)
	}
	if err != nil {
		return fmt.Errorf("raftlock: unlock %q: %w", m.name, err)
	}
	return nil
}
