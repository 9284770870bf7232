package fsm

import (
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidSessionID is returned by ParseSessionID for anything but 32 hex characters.
var ErrInvalidSessionID = errors.New("fsm: session id must be 32 hex characters")

// SessionID is the 128-bit random identifier of a session; the zero value is never valid.
type SessionID [16]byte

// String returns the id as 32 lower-case hex characters.
func (id SessionID) String() string { return hex.EncodeToString(id[:]) }

// IsZero reports whether id is the zero (invalid) id.
func (id SessionID) IsZero() bool { return id == SessionID{} }

// ParseSessionID parses the 32-hex-character form of a session id.
func ParseSessionID(s string) (SessionID, error) {
	var id SessionID
	if len(s) != 32 {
		return id, ErrInvalidSessionID
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("%w: %w", ErrInvalidSessionID, err)
	}
	if id.IsZero() {
		return id, ErrInvalidSessionID
	}
	return id, nil
}

// Status is the business outcome of applying a command.
type Status uint8

// Outcomes of Apply.
const (
	StatusOK               Status = iota // done; for an acquire, the session holds the lock
	StatusSessionNotFound                // the session does not exist (never created, expired or destroyed)
	StatusLockHeld                       // another session holds the lock; nothing queued
	StatusLockDelayed                    // the lock is free but inside a lock-delay
	StatusQueued                         // the session waits in the lock's queue
	StatusNotHolder                      // release by a session/token that does not hold the lock
	StatusNotQueued                      // cancel-wait found the session neither queued nor holding
	StatusCancelled                      // cancel-wait removed the session from the queue
	StatusExists                         // create-session with an id already in use
	StatusAttemptCancelled               // acquire with an attempt the session cancelled

	StatusAlreadyBootstrapped // acl-bootstrap after the first one
	StatusNotFound            // delete of a token or policy that does not exist
	StatusPolicyNotFound      // a new token names a policy that does not exist
	StatusBuiltinPolicy       // a change to the built-in management policy
	StatusInvalid             // an ACL command with a field apply refuses (empty name, repeated prefix or policy)
	StatusLastManagement      // delete of the last token with the management policy
	StatusStaleTerm           // an expiry decided in an earlier term than its log entry's
	StatusLimitMismatch       // acquire whose limit is not the one the lock has (Result.Limit)
	StatusModeMismatch        // acquire by a session that holds or awaits the lock in the other mode
)

var statusNames = [...]string{"ok", "session_not_found", "lock_held", "lock_delayed", "queued",
	"not_holder", "not_queued", "cancelled", "exists", "attempt_cancelled",
	"already_bootstrapped", "not_found", "policy_not_found", "builtin_policy", "invalid", "last_management", "stale_term",
	"limit_mismatch", "mode_mismatch"}

// String names the status.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// Result is what Apply returns for every command.
type Result struct {
	Status Status
	// Index is the log index of the command.
	Index uint64
	// Token and Value describe the caller's grant (StatusOK on acquire or cancel-wait), or the
	// current holder's token when Status is StatusLockHeld or StatusQueued.
	Token uint64
	Value string
	// Holder is the holding session when Status is StatusLockHeld or StatusQueued, and the
	// session a forced release ended.
	Holder SessionID
	// DelayUntil is the end of the lock-delay (leader clock, Unix nanoseconds) for StatusLockDelayed,
	// for StatusQueued when the lock is free but delayed, and for a forced release the
	// earliest end of the named lock's delays.
	DelayUntil int64
	// Released lists, sorted, the locks a destroy or expiry released.
	Released []string
	// Limit is the lock's limit (1 for a lock) when Status is StatusLimitMismatch.
	Limit uint32
	// Err is set only when the command could not be decoded.
	Err error
}

// SessionInfo is a read-only view of a session.
type SessionInfo struct {
	ID          SessionID
	Name        string
	TTL         time.Duration
	LockDelay   time.Duration
	CreateIndex uint64
	Locks       []string // sorted names of the locks the session holds
	// Owner is the accessor id of the token that created the session; "" for sessions
	// created without ACLs.
	Owner string
	// Waiting are the locks in whose queue the session waits, sorted by name.
	Waiting []WaitInfo
}

// WaitInfo is one lock a session waits for, and since when (the time of the log entry that
// queued it, Unix ns; FeatureGrantTimes), 0 if unknown.
type WaitInfo struct {
	Lock  string
	Since int64
}

// LockInfo is a read-only view of a lock. A lock that does not exist reads as free, with
// ModifyIndex set to the last index at which any lock entry was removed, so that a blocking
// query never waits forever on a change it missed. Holder, Token and Value are those of the
// newest grant when several sessions hold it (FSM.Holders lists them all).
type LockInfo struct {
	Name        string
	Held        bool
	Holder      SessionID
	Token       uint64
	Value       string
	Waiters     int
	ModifyIndex uint64
	// DelayUntil is the earliest end of the lock-delays in force, or 0.
	DelayUntil int64
	// Limit is a semaphore's limit, 0 for a lock.
	Limit uint32
	// Shared says that the lock's holds (and delays) are shared ones.
	Shared bool
	// Since is the time of the log entry that made the newest grant (Unix ns;
	// FeatureGrantTimes), 0 if unknown or free.
	Since int64
}

// Member is the metadata a node publishes about itself through the log.
type Member struct {
	ID       string
	RaftAddr string
	HTTPAddr string
}

// DelayedLock is a lock-delay yet to be ended by a DelayEnded command.
type DelayedLock struct {
	Name  string
	Until int64
	// Index names the delay in the DelayEnded that ends it (the index of the expiry that
	// started it); 0 for a delay started before FeatureSemaphoresRWLocks was enabled, which is
	// its lock's only one and is ended by the lock's name alone.
	Index uint64
	// Length is the whole delay, or 0 if the state was restored from a snapshot written before
	// it was kept.
	Length time.Duration
}

// EventKind says what an Event reports.
type EventKind uint8

// Kinds of events.
const (
	EventGranted         EventKind = iota + 1 // Session was granted Lock with Token
	EventLockChanged                          // Lock's visible state changed at Index; State is it after the command
	EventSessionCreated                       // Session was created with TTL
	EventSessionEnded                         // Session ended (expired or destroyed)
	EventDelayStarted                         // Lock is delayed until DelayUntil
	EventMembersChanged                       // the membership metadata changed
	EventRestored                             // the whole state was replaced from a snapshot; Index is its log index where its reader tells it, else its last lock change
	EventReleased                             // Session's hold on Lock ended (release, destroy or expiry)
	EventFeaturesChanged                      // features were enabled
	EventWaitDropped                          // Session's wait for Lock was dropped (its token was deleted)
	EventQueueReady                           // Lock's first waiter could be granted, by a ServeQueue
)

// Event reports one effect of an applied command to the Observer.
type Event struct {
	Kind       EventKind
	Index      uint64
	Lock       string
	Session    SessionID
	Token      uint64
	TTL        time.Duration
	DelayUntil int64
	// Delay is the length of the lock-delay that EventDelayStarted reports, and DelayIndex
	// the index that names it (see DelayedLock.Index).
	Delay      time.Duration
	DelayIndex uint64
	// Expired is set on EventSessionEnded when the session expired rather than was destroyed.
	Expired bool
	// State is, on EventLockChanged, the lock's state once the whole command has applied, with
	// ModifyIndex set to Index (a lock the command left free reads as free), with its holders
	// when it is a semaphore or shared. A command reports each lock it changed once.
	State LockView
}

// Observer learns about the effects of applied commands. Observe is called after the state
// lock is released, in log order, from the goroutine that applies the log; it must not block
// and must not keep the slice.
type Observer interface {
	Observe(events []Event)
}
