package workload

import (
	"slices"
	"sync"

	"github.com/raftlock/raftlock/jepsen/history"
)

// KindResource is the resource that semaphore and read/write-lock holders use, fenced by the
// rules docs/api.md gives for them. A semaphore's resource keeps the Limit highest tokens it
// accepted and refuses a token below all of them once it has that many: so at most Limit
// writers are accepted at once. A read/write lock's resource accepts a write whose token is at
// least every token it accepted (reads included), and a read whose token is at least the last
// accepted write's: so no writer is accepted while another holder is. Each access is recorded
// while the resource is locked (history.HoldAccess), so the IDs give the resource's order.
type KindResource struct {
	rec *history.Recorder
	// ignoreTokens accepts every access: the situation the kinds checkers must catch.
	ignoreTokens bool

	mu        sync.Mutex
	top       map[string][]uint64 // a semaphore's highest accepted tokens, ascending, at most its limit
	seen      map[string]uint64   // a read/write lock's highest accepted token
	lastWrite map[string]uint64   // a read/write lock's highest accepted write token
}

// NewKindResource returns the resource; with ignoreTokens it accepts everything.
func NewKindResource(rec *history.Recorder, ignoreTokens bool) *KindResource {
	return &KindResource{rec: rec, ignoreTokens: ignoreTokens, top: map[string][]uint64{}, seen: map[string]uint64{},
		lastWrite: map[string]uint64{}}
}

// Access is one access of the resource of lock by the holder of token: api is
// history.APIPermit for a semaphore's holder (with its limit), history.APIShared for a read
// or history.APIExclusive for a write of a read/write lock's. It reports whether the resource
// accepted it.
func (r *KindResource) Access(process int, lock, session, api string, limit int, token uint64, stale bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	invoke := r.rec.Now()
	ok := r.ignoreTokens
	switch api {
	case history.APIPermit:
		ok = r.permit(lock, token, limit) || ok
	case history.APIShared:
		if ok = ok || token >= r.lastWrite[lock]; ok {
			r.seen[lock] = max(r.seen[lock], token)
		}
	default:
		if ok = ok || token >= r.seen[lock]; ok {
			r.seen[lock] = max(r.seen[lock], token)
			r.lastWrite[lock] = max(r.lastWrite[lock], token)
		}
	}
	op := history.Op{Process: process, Kind: history.HoldAccess, Type: history.OK, Invoke: invoke, Lock: lock,
		Session: session, API: api, Limit: limit, Token: token}
	if !ok {
		op.Type = history.Fail
	}
	if stale {
		op.Detail = "stale"
	}
	r.rec.Add(op)
	return ok
}

// permit applies a semaphore's rule: token is accepted while it is among the limit highest
// tokens accepted, counting itself.
func (r *KindResource) permit(lock string, token uint64, limit int) bool {
	top := r.top[lock]
	if slices.Contains(top, token) {
		return true
	}
	if len(top) >= limit && token < top[0] {
		return false
	}
	top = append(top, token)
	slices.Sort(top)
	if len(top) > limit {
		top = top[len(top)-limit:]
	}
	r.top[lock] = top
	return true
}
