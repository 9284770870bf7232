package client

import "context"

// Semaphore is a distributed counting semaphore held by a Session: up to Limit sessions hold
// it at once, each under a fencing token of its own (the log index of its grant), and the
// others wait in arrival order. The limit is fixed by the first acquire while the lock has
// holders, waiters or lock-delays; acquiring with another limit (a Mutex's is 1) fails with
// ErrLimitMismatch. A session holds one permit at most: to hold two, use two sessions.
//
// It behaves as a Mutex does in everything else (it is one, asking for a permit): each
// Acquire or TryAcquire call is one attempt, withdrawn in the background if it ends without a
// permit, Release fences the attempt that won, and once the session is lost the permit is
// forgotten before Session.Done closes (Token 0, Context done). Work done under the permit
// should stop when Context is done and pass Token to the protected resource, which must
// accept up to Limit writers at once: see docs/api.md, "Semaphores", for a rule that keeps it
// safe (it remembers the Limit highest tokens it accepted).
type Semaphore struct {
	m     *Mutex
	limit int
}

// NewSemaphore returns a Semaphore of limit permits (1 to 1000) on the lock name for session
// s. It does not contact the cluster; a limit out of range fails Acquire.
func NewSemaphore(s *Session, name string, limit int, opts ...MutexOption) *Semaphore {
	m := NewMutex(s, name, opts...)
	m.limit = &limit
	return &Semaphore{m: m, limit: limit}
}

// Key returns the lock name.
func (x *Semaphore) Key() string { return x.m.name }

// Limit returns how many sessions may hold the semaphore at once.
func (x *Semaphore) Limit() int { return x.limit }

// Session returns the session that holds (or will hold) a permit.
func (x *Semaphore) Session() *Session { return x.m.s }

// Acquire blocks until a permit is granted, ctx is done or the session is lost, as Mutex.Lock.
func (x *Semaphore) Acquire(ctx context.Context) error {
	if err := x.check(); err != nil {
		return err
	}
	return x.m.Lock(ctx)
}

// TryAcquire takes a permit if one is free and nobody waits, and fails at once otherwise, as
// Mutex.TryLock, with an error that matches ErrLockHeld (naming the newest holder) or
// ErrLockDelayed.
func (x *Semaphore) TryAcquire(ctx context.Context) error {
	if err := x.check(); err != nil {
		return err
	}
	return x.m.TryLock(ctx)
}

// Release gives the permit back, as Mutex.Unlock: the next waiter is granted it in the same
// command.
func (x *Semaphore) Release(ctx context.Context) error { return x.m.Unlock(ctx) }

// Token returns the fencing token of the permit held, or 0 when none is (including as soon as
// the session's loss is known).
func (x *Semaphore) Token() uint64 { return x.m.Token() }

// Context returns a context cancelled when the permit is given back or lost with the session,
// as Mutex.Context.
func (x *Semaphore) Context() context.Context { return x.m.Context() }

func (x *Semaphore) check() error {
	if x.limit < 1 || x.limit > maxLimit {
		return errorf("semaphore %q: %w: limit %d is not between 1 and %d", x.m.name, ErrInvalidArgument, x.limit, maxLimit)
	}
	return nil
}

// maxLimit is the highest limit the API accepts.
const maxLimit = 1000
