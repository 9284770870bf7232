package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Sentinel errors. API errors ([*APIError]) match the sentinel of their code with errors.Is.
var (
	// ErrInvalidArgument is the server's 400 invalid_argument, or a request refused locally.
	ErrInvalidArgument = errors.New("raftlock: invalid argument")
	// ErrUnauthorized is the server's 401 unauthorized.
	ErrUnauthorized = errors.New("raftlock: unauthorized")
	// ErrForbidden is the server's 403 forbidden.
	ErrForbidden = errors.New("raftlock: forbidden")
	// ErrSessionNotFound is the server's 404 session_not_found: the session expired or was destroyed.
	ErrSessionNotFound = errors.New("raftlock: session not found")
	// ErrSessionExpired matches the same server answer as ErrSessionNotFound; Session.Err
	// returns it when the server reported the session gone.
	ErrSessionExpired = errors.New("raftlock: session expired")
	// ErrNotFound is the server's 404 not_found (unknown route or member).
	ErrNotFound = errors.New("raftlock: not found")
	// ErrLockHeld is the server's 409 lock_held: another session holds the lock.
	ErrLockHeld = errors.New("raftlock: lock held by another session")
	// ErrLockDelayed is the server's 409 lock_delayed: the lock is free but inside a lock-delay.
	ErrLockDelayed = errors.New("raftlock: lock delayed")
	// ErrAttemptCancelled is the server's 409 attempt_cancelled: an acquire carried an attempt
	// that its session had cancelled (CancelAcquire).
	ErrAttemptCancelled = errors.New("raftlock: acquire attempt cancelled")
	// ErrNotHolder is the server's 409 not_holder, or an Unlock of a Mutex that is not locked.
	ErrNotHolder = errors.New("raftlock: not the lock holder")
	// ErrAlreadyExists is the server's 409 already_exists: a policy with that name exists.
	ErrAlreadyExists = errors.New("raftlock: already exists")
	// ErrFeatureNotEnabled is the server's 409 feature_not_enabled: the request needs a
	// feature that some member of the cluster does not support yet.
	ErrFeatureNotEnabled = errors.New("raftlock: feature not enabled in the cluster")
	// ErrPayloadTooLarge is the server's 413 payload_too_large.
	ErrPayloadTooLarge = errors.New("raftlock: payload too large")
	// ErrTooManyRequests is the server's 429 too_many_requests.
	ErrTooManyRequests = errors.New("raftlock: too many requests")
	// ErrNoLeader is the server's 503 no_leader: nothing was applied.
	ErrNoLeader = errors.New("raftlock: cluster has no leader")
	// ErrTimeout is the server's 503 timeout: the outcome of the command is unknown.
	ErrTimeout = errors.New("raftlock: outcome unknown (timeout)")
	// ErrInternal is any other server error.
	ErrInternal = errors.New("raftlock: internal server error")
	// ErrUnavailable means no endpoint could be reached.
	ErrUnavailable = errors.New("raftlock: no endpoint reachable")

	// ErrSessionDeadline is Session.Err when the local deadline passed without a renewal.
	ErrSessionDeadline = errors.New("raftlock: session deadline passed without renewal")
	// ErrSessionClosed is Session.Err after Session.Close.
	ErrSessionClosed = errors.New("raftlock: session closed")
	// ErrLockLost is returned when a lock held by a Mutex or Election was lost with its session.
	ErrLockLost = errors.New("raftlock: lock lost")
	// ErrElectionNoLeader means that nobody leads the election.
	ErrElectionNoLeader = errors.New("raftlock: election has no leader")
	// ErrNotLeader is returned by Proclaim and Resign when this candidate does not lead.
	ErrNotLeader = errors.New("raftlock: not the election leader")
	// ErrStaleToken is returned by a Fence for a token lower than one it already accepted.
	ErrStaleToken = errors.New("raftlock: stale fencing token")
)

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
	// RetryAfter is the server's Retry-After hint, if any.
	RetryAfter time.Duration
	// Endpoint is the endpoint that answered.
	Endpoint string
}

// Error implements error.
func (e *APIError) Error() string {
	msg := fmt.Sprintf("raftlock: %s (%d %s)", e.Message, e.StatusCode, e.Code)
	switch {
	case e.Holder != nil && e.Holder.Session != "":
		msg += fmt.Sprintf(": held by session %s with token %d", e.Holder.Session, e.Holder.Token)
	case e.Holder != nil: // the server does not show this caller whose session it is
		msg += fmt.Sprintf(": held with token %d", e.Holder.Token)
	}
	if e.AvailableIn > 0 {
		msg += fmt.Sprintf(": available in %s", e.AvailableIn)
	}
	return msg
}

// Is reports whether target is the sentinel error of e's code.
func (e *APIError) Is(target error) bool {
	if target == ErrSessionExpired {
		return e.Code == api.CodeSessionNotFound
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
