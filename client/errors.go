package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Sentinel errors: match them with errors.Is. An error answered by the server ([*APIError])
// matches the one of its code; the others name what the client itself found.
var (
	// ErrInvalidArgument is the server's 400 invalid_argument, or a request refused locally.
	ErrInvalidArgument = newError("invalid argument")
	// ErrUnauthorized is the server's 401 unauthorized.
	ErrUnauthorized = newError("unauthorized")
	// ErrForbidden is the server's 403 forbidden.
	ErrForbidden = newError("forbidden")
	// ErrSessionNotFound is the server's 404 session_not_found: the session expired or was
	// destroyed. Session.Err matches it once the server has reported the session gone.
	ErrSessionNotFound = newError("session not found")
	// ErrNotFound is the server's 404 not_found or 405 method_not_allowed: no such route,
	// member, policy or token.
	ErrNotFound = newError("not found")
	// ErrLockHeld is the server's 409 lock_held: another session holds the lock.
	ErrLockHeld = newError("lock held by another session")
	// ErrLockDelayed is the server's 409 lock_delayed: the lock is free but inside a lock-delay.
	ErrLockDelayed = newError("lock delayed")
	// ErrAttemptCancelled is the server's 409 attempt_cancelled: an acquire carried an attempt
	// that its session had ended (Raw.CancelAcquire, Raw.Release).
	ErrAttemptCancelled = newError("acquire attempt cancelled")
	// ErrNotHolder is the server's 409 not_holder, or an Unlock of a Mutex that is not locked
	// (an RUnlock of an RWMutex that is not read-locked, ...).
	ErrNotHolder = newError("not the lock holder")
	// ErrLimitMismatch is the server's 409 limit_mismatch: the lock is used with another
	// limit (a Mutex's is 1) while it has holders, waiters or lock-delays; APIError.Limit
	// says which.
	ErrLimitMismatch = newError("lock used with another limit")
	// ErrModeMismatch is the server's 409 mode_mismatch: the session holds or awaits the lock
	// in the other mode (shared or exclusive). An RWMutex returns it too for an RLock while
	// it holds the lock exclusively, and for a Lock while it holds it shared.
	ErrModeMismatch = newError("lock held or awaited in the other mode")
	// ErrAlreadyExists is the server's 409 already_exists: a policy with that name exists.
	ErrAlreadyExists = newError("already exists")
	// ErrFeatureNotEnabled means the cluster does not support this yet: the server's 409
	// feature_not_enabled (the request needs a feature that some member does not support, or
	// that the leader has not enabled yet), and also the 400 invalid_argument with which a
	// node of a version from before features (0.1.0) refuses a request field it does not know
	// (a Semaphore's "limit", an RWMutex's "mode"). Nothing was applied. A Semaphore or an
	// RWMutex's RLock returns it at once rather than wait for an upgrade.
	ErrFeatureNotEnabled = newError("the cluster does not support this yet (feature not enabled)")
	// ErrPayloadTooLarge is the server's 413 payload_too_large.
	ErrPayloadTooLarge = newError("payload too large")
	// ErrTooManyRequests is the server's 429 too_many_requests.
	ErrTooManyRequests = newError("too many requests")
	// ErrNoLeader is the server's 503 no_leader: nothing was applied.
	ErrNoLeader = newError("cluster has no leader")
	// ErrTimeout is the server's 503 timeout: the outcome of the command is unknown.
	ErrTimeout = newError("outcome unknown (timeout)")
	// ErrInternal is any other server error.
	ErrInternal = newError("internal server error")
	// ErrUnavailable means no endpoint could be reached.
	ErrUnavailable = newError("no endpoint reachable")

	// ErrSessionDeadline is Session.Err when the local deadline passed without a renewal.
	ErrSessionDeadline = newError("session deadline passed without renewal")
	// ErrSessionClosed is Session.Err after Session.Close.
	ErrSessionClosed = newError("session closed")
	// ErrLockLost is returned when a lock held by a Mutex or Election was lost with its session.
	ErrLockLost = newError("lock lost")
	// ErrElectionNoLeader means that nobody leads the election.
	ErrElectionNoLeader = newError("election has no leader")
	// ErrNotLeader is returned by Proclaim and Resign when this candidate does not lead.
	ErrNotLeader = newError("not the election leader")
	// ErrStaleToken is returned by a Fence for a token lower than one it already accepted.
	ErrStaleToken = newError("stale fencing token")
)

// The package's errors read "raftlock: " and what happened, with the prefix once however
// many of its errors one wraps: each of its error types has the prefix in Error and leaves it
// out in text, which errorf uses for the errors it wraps.
const errPrefix = "raftlock: "

// texter is an error of the package that can say what it is without the package prefix.
type texter interface{ text() string }

// sentinelError is the type of the sentinel errors; they match by identity.
type sentinelError struct{ msg string }

func newError(msg string) error { return &sentinelError{msg} }

// Error implements error.
func (e *sentinelError) Error() string { return errPrefix + e.msg }

func (e *sentinelError) text() string { return e.msg }

// wrapError is an error made by errorf.
type wrapError struct{ err error }

// Error implements error.
func (e *wrapError) Error() string { return errPrefix + e.err.Error() }

func (e *wrapError) text() string { return e.err.Error() }

// Unwrap returns what errorf made.
func (e *wrapError) Unwrap() error { return e.err }

// unprefixed shows an error without the package prefix, in the text errorf builds.
type unprefixed struct{ err error }

// Error implements error.
func (u unprefixed) Error() string { return textOf(u.err) }

// Unwrap returns the error shown.
func (u unprefixed) Unwrap() error { return u.err }

// textOf is err's message without the package prefix.
func textOf(err error) string {
	if t, ok := err.(texter); ok {
		return t.text()
	}
	return err.Error()
}

// errorf is fmt.Errorf for the package's errors: the result reads "raftlock: " and the
// message, in which the errors among args appear without their own prefix.
func errorf(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = unprefixed{err}
		}
	}
	return &wrapError{fmt.Errorf(format, args...)}
}

// sentinelFor returns the sentinel error of an API error code, or nil for an unknown code.
func sentinelFor(code string) error {
	switch code {
	case api.CodeInvalidArgument:
		return ErrInvalidArgument
	case api.CodeUnauthorized:
		return ErrUnauthorized
	case api.CodeForbidden:
		return ErrForbidden
	case api.CodeSessionNotFound:
		return ErrSessionNotFound
	case api.CodeNotFound, api.CodeMethodNotAllowed:
		return ErrNotFound
	case api.CodeLockHeld:
		return ErrLockHeld
	case api.CodeLockDelayed:
		return ErrLockDelayed
	case api.CodeAttemptCancelled:
		return ErrAttemptCancelled
	case api.CodeNotHolder:
		return ErrNotHolder
	case api.CodeLimitMismatch:
		return ErrLimitMismatch
	case api.CodeModeMismatch:
		return ErrModeMismatch
	case api.CodeAlreadyExists:
		return ErrAlreadyExists
	case api.CodeFeatureNotEnabled:
		return ErrFeatureNotEnabled
	case api.CodePayloadTooLarge:
		return ErrPayloadTooLarge
	case api.CodeTooManyRequests:
		return ErrTooManyRequests
	case api.CodeNoLeader:
		return ErrNoLeader
	case api.CodeTimeout:
		return ErrTimeout
	case api.CodeInternal:
		return ErrInternal
	}
	return nil
}

// APIError is an error answered by the server, with the fields of the API's error body.
type APIError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the API error code, e.g. "lock_held".
	Code string
	// Message is the server's human sentence.
	Message string
	// Holder is the current holder for lock_held, else nil.
	Holder *api.Holder
	// AvailableIn is how long a lock_delayed lock stays unavailable.
	AvailableIn time.Duration
	// Limit is the lock's limit for limit_mismatch (1 for a lock), else 0.
	Limit int
	// RetryAfter is the server's Retry-After hint, if any.
	RetryAfter time.Duration
	// Endpoint is the endpoint that answered.
	Endpoint string
}

// Error implements error.
func (e *APIError) Error() string { return errPrefix + e.text() }

func (e *APIError) text() string {
	msg := fmt.Sprintf("%s (%d %s)", e.Message, e.StatusCode, e.Code)
	switch {
	case e.Holder != nil && e.Holder.Session != "":
		msg += fmt.Sprintf(": held by session %s with token %d", e.Holder.Session, e.Holder.Token)
	case e.Holder != nil: // the server does not show this caller whose session it is
		msg += fmt.Sprintf(": held with token %d", e.Holder.Token)
	}
	if e.AvailableIn > 0 {
		msg += fmt.Sprintf(": available in %s", e.AvailableIn)
	}
	if e.Limit > 0 {
		msg += fmt.Sprintf(": its limit is %d", e.Limit)
	}
	if e.Code == api.CodeFeatureNotEnabled || e.olderServer() {
		msg += ": the cluster does not support this yet"
		if e.olderServer() {
			msg += " (the node that answered runs an older version, without this field: upgrade every member)"
		}
	}
	return msg
}

// olderServer reports whether e is how a node of an older version refuses a request field it
// does not know: 400 invalid_argument naming an unknown field. The client sends such fields
// (a limit, a shared mode) only for what needs them, so it means the cluster does not support
// that yet, as 409 feature_not_enabled does from a version that knows features.
func (e *APIError) olderServer() bool {
	return e.StatusCode == http.StatusBadRequest && e.Code == api.CodeInvalidArgument &&
		strings.Contains(e.Message, `unknown field "`)
}

// Is reports whether target is the sentinel error of e's code; an older node's refusal of an
// unknown field matches ErrFeatureNotEnabled as well as ErrInvalidArgument.
func (e *APIError) Is(target error) bool {
	if target == ErrFeatureNotEnabled && e.olderServer() {
		return true
	}
	if s := sentinelFor(e.Code); s != nil {
		return s == target
	}
	return target == ErrInternal && e.StatusCode >= 500
}

// isTransient reports whether err is worth asking again: the cluster may answer later.
func isTransient(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoLeader) ||
		errors.Is(err, ErrTimeout) || errors.Is(err, ErrTooManyRequests) ||
		errors.Is(err, ErrInternal) || errors.Is(err, ErrFeatureNotEnabled)
}
