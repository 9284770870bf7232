package client

import "context"

// RWMutex is a distributed read/write lock held by a Session: any number of sessions hold it
// shared (RLock) at once, one holds it exclusively (Lock) alone. Waiters are granted in
// arrival order, so a writer that waits stops the readers that come after it from overtaking
// it, and no writer starves. Every grant, shared or exclusive, has a fencing token of its own.
// A plain Mutex on the same name is an exclusive holder among them.
//
// A session holds the lock once, in one mode: an RLock while this RWMutex holds it
// exclusively, or a Lock while it holds it shared, fails with ErrModeMismatch (release it
// first: there is no upgrade or downgrade), and RUnlock and Unlock fail with ErrNotHolder for
// a hold of the other mode. Readers and writers that run at once need a session each.
//
// It behaves as a Mutex does in everything else: each call that takes the lock is one
// attempt, withdrawn in the background if it ends without a grant, an unlock fences the
// attempt that won, and once the session is lost the hold is forgotten before Session.Done
// closes (Token 0, Context done). A resource protected by a read/write lock stays safe if it
// takes writes only from a token at least as high as every token it has seen, and reads from
// one at least as high as the last writer's: see docs/api.md, "Read/write locks".
type RWMutex struct {
	m *Mutex
}

// NewRWMutex returns an RWMutex on the lock name for session s. It does not contact the
// cluster.
func NewRWMutex(s *Session, name string, opts ...MutexOption) *RWMutex {
	return &RWMutex{m: NewMutex(s, name, opts...)}
}

// Key returns the lock name.
func (rw *RWMutex) Key() string { return rw.m.name }

// Session returns the session that holds (or will hold) the lock.
func (rw *RWMutex) Session() *Session { return rw.m.s }

// RLock blocks until the lock is held shared, ctx is done or the session is lost, as
// Mutex.Lock. It returns at once if this RWMutex already holds it shared.
func (rw *RWMutex) RLock(ctx context.Context) error { return rw.m.lock(ctx, true, true) }

// TryRLock takes a shared hold if no writer holds or waits, and fails at once otherwise.
func (rw *RWMutex) TryRLock(ctx context.Context) error { return rw.m.lock(ctx, false, true) }

// RUnlock ends a shared hold, as Mutex.Unlock.
func (rw *RWMutex) RUnlock(ctx context.Context) error { return rw.m.unlock(ctx, true) }

// Lock blocks until the lock is held exclusively, ctx is done or the session is lost, as
// Mutex.Lock. It returns at once if this RWMutex already holds it exclusively.
func (rw *RWMutex) Lock(ctx context.Context) error { return rw.m.lock(ctx, true, false) }

// TryLock takes the lock exclusively if nobody holds it or waits, and fails at once otherwise.
func (rw *RWMutex) TryLock(ctx context.Context) error { return rw.m.lock(ctx, false, false) }

// Unlock ends an exclusive hold, as Mutex.Unlock.
func (rw *RWMutex) Unlock(ctx context.Context) error { return rw.m.unlock(ctx, false) }

// Token returns the fencing token of the current hold, shared or exclusive, or 0 when not
// held (including as soon as the session's loss is known).
func (rw *RWMutex) Token() uint64 { return rw.m.Token() }

// Shared reports whether the current hold is a shared one (false when not held).
func (rw *RWMutex) Shared() bool {
	if h := rw.m.current(); h != nil {
		return h.shared
	}
	return false
}

// Context returns a context cancelled when the hold ends, as Mutex.Context.
func (rw *RWMutex) Context() context.Context { return rw.m.Context() }
