package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/raftlock/raftlock/api"
)

// HeaderToken is the HTTP header that carries a fencing token to a protected resource.
const HeaderToken = "X-Raftlock-Token"

// Fence is the protected resource's side of fencing: it remembers, per lock, the highest token
// it has accepted, and rejects operations that carry a lower one. A holder whose lease ran out
// while it was paused still believes it holds the lock; its stale token is what stops it.
// A Fence is safe for concurrent use. The zero value is not usable; call NewFence.
type Fence struct {
	mu    sync.Mutex
	locks map[string]*fenceEntry
}

type fenceEntry struct {
	mu      sync.Mutex // serialises Do for this lock
	highest uint64
}

// StaleTokenError is the error of a Fence for a stale token; it matches ErrStaleToken.
type StaleTokenError struct {
	// Lock is the lock name.
	Lock string
	// Token is the token presented.
	Token uint64
	// Highest is the highest token already accepted for the lock.
	Highest uint64
}

// Error implements error.
func (e *StaleTokenError) Error() string { return errPrefix + e.text() }

func (e *StaleTokenError) text() string {
	return fmt.Sprintf("stale fencing token %d for lock %q: token %d was already accepted", e.Token, e.Lock, e.Highest)
}

// Is makes the error match ErrStaleToken.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// NewFence returns an empty Fence.
func NewFence() *Fence { return &Fence{locks: make(map[string]*fenceEntry)} }

func (f *Fence) entry(lock string) *fenceEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.locks[lock]
	if e == nil {
		e = &fenceEntry{}
		f.locks[lock] = e
	}
	return e
}

// Check accepts token for lock if it is at least the highest accepted so far (the same holder
// sends the same token many times), and remembers it. A lower token gets a *StaleTokenError.
// Token 0 is never valid.
func (f *Fence) Check(lock string, token uint64) error {
	return f.Do(lock, token, nil)
}

// Do is Check followed by fn, with no other Check or Do on the same lock in between, so that
// a newer holder's operation cannot be overtaken by an older one that passed the check first.
// fn's error is returned as it is; fn may be nil.
func (f *Fence) Do(lock string, token uint64, fn func() error) error {
	if token == 0 {
		return errorf("%w: missing fencing token for lock %q", ErrInvalidArgument, lock)
	}
	e := f.entry(lock)
	e.mu.Lock()
	defer e.mu.Unlock()
	if token < e.highest {
		return &StaleTokenError{Lock: lock, Token: token, Highest: e.highest}
	}
	e.highest = token
	if fn == nil {
		return nil
	}
	return fn()
}

// Highest returns the highest token accepted for lock, 0 if none.
func (f *Fence) Highest(lock string) uint64 {
	e := f.entry(lock)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.highest
}

// SetToken puts a fencing token into the headers of a request to a protected resource.
func SetToken(h http.Header, token uint64) {
	h.Set(HeaderToken, strconv.FormatUint(token, 10))
}

// TokenFromHeader reads the fencing token set by SetToken.
func TokenFromHeader(h http.Header) (uint64, error) {
	v := h.Get(HeaderToken)
	if v == "" {
		return 0, errorf("%w: no %s header", ErrInvalidArgument, HeaderToken)
	}
	t, err := strconv.ParseUint(v, 10, 64)
	if err != nil || t == 0 {
		return 0, errorf("%w: bad %s header %q", ErrInvalidArgument, HeaderToken, v)
	}
	return t, nil
}

// Handler enforces fencing for lock in front of next: a request without a valid token header
// gets 400, one with a stale token 409, and accepted requests run one at a time through
// Fence.Do. Error answers use the raftlock error body. Typical use:
//
//	http.Handle("/write", fence.Handler("jobs/nightly", writeHandler))
func (f *Fence) Handler(lock string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := TokenFromHeader(r.Header)
		if err == nil {
			err = f.Do(lock, token, func() error {
				next.ServeHTTP(w, r)
				return nil
			})
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrStaleToken):
			writeFenceError(w, http.StatusConflict, "stale_token", err)
		default:
			writeFenceError(w, http.StatusBadRequest, "invalid_argument", err)
		}
	})
}

func writeFenceError(w http.ResponseWriter, status int, code string, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: err.Error()}})
}
