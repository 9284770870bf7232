package api

// Headers every response carries (see docs/api.md, "General rules").
const (
	// HeaderIndex is the last applied Raft index of the node that executed the request.
	HeaderIndex = "X-Raftlock-Index"
	// HeaderLeader is the id of the current leader, when known.
	HeaderLeader = "X-Raftlock-Leader"
	// HeaderForwarded marks a request a follower forwarded to the leader; it is never forwarded again.
	HeaderForwarded = "X-Raftlock-Forwarded"
	// HeaderFeatures is the number of features the cluster has enabled, as the node that
	// executed the request applied the log: a client that learned fewer reads them again.
	HeaderFeatures = "X-Raftlock-Features"
)

// Error codes of the error body.
const (
	CodeInvalidArgument  = "invalid_argument"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeSessionNotFound  = "session_not_found"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeLockHeld         = "lock_held"
	CodeLockDelayed      = "lock_delayed"
	CodeNotHolder        = "not_holder"
	// CodeAttemptCancelled refuses an acquire whose attempt the session cancelled (an addition
	// to v1: only requests that carry an attempt can get it).
	CodeAttemptCancelled = "attempt_cancelled"
	CodePayloadTooLarge  = "payload_too_large"
	CodeTooManyRequests  = "too_many_requests"
	CodeNoLeader         = "no_leader"
	CodeTimeout          = "timeout"
	CodeInternal         = "internal"
	// CodeFeatureNotEnabled refuses a request that needs a feature the cluster has not
	// enabled yet, because a member runs an older version (an addition to v1, HTTP 409).
	CodeFeatureNotEnabled = "feature_not_enabled"
	// CodeIncompatible refuses to add a member that lacks a feature the cluster has enabled
	// (an addition to v1, HTTP 409).
	CodeIncompatible = "incompatible"
	// CodeNotCaughtUp refuses to promote a non-voter that has not caught up with the leader's
	// log yet (an addition to v1).
	CodeNotCaughtUp = "not_caught_up"
	// CodeRemoved is the answer of /v1/health and /v1/ready on a node that was removed from
	// its cluster (an addition to v1).
	CodeRemoved = "removed"
	// CodeMemberConflict refuses to add a member whose id is an existing member's with other
	// addresses, or whose Raft address another member has (an addition to v1, HTTP 409).
	CodeMemberConflict = "member_conflict"
	// CodeMembershipRefused refuses a membership change that Raft cannot make as it stands:
	// removing the only voter, handing leadership to a non-voter or to the leader itself
	// (an addition to v1, HTTP 409). Nothing was changed.
	CodeMembershipRefused = "membership_refused"
	// CodeLimitMismatch refuses an acquire whose limit is not the one the lock is used with
	// while it has holders, waiters or lock-delays (an addition to v1, HTTP 409; the body adds
	// "limit").
	CodeLimitMismatch = "limit_mismatch"
	// CodeModeMismatch refuses an acquire by a session that holds or awaits the lock in the
	// other mode, shared or exclusive (an addition to v1, HTTP 409).
	CodeModeMismatch = "mode_mismatch"
	// CodeHeaderTooLarge refuses a request whose line and headers are over the node's limit
	// (an addition to v1, HTTP 431); the connection is closed.
	CodeHeaderTooLarge = "header_too_large"
)

// Modes of an acquire and of a lock's holders (an addition to v1).
const (
	ModeExclusive = "exclusive"
	ModeShared    = "shared"
)

// ErrorDetail is the inner object of an error body.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error       ErrorDetail `json:"error"`
	Holder      *Holder     `json:"holder,omitempty"`
	AvailableIn string      `json:"available_in,omitempty"`
	// Limit is the lock's limit, with limit_mismatch (1 for a lock).
	Limit int `json:"limit,omitempty"`
}

// Holder identifies the session holding a lock and its fencing token. Under ACLs, Session is
// left out for a caller that neither owns the session nor has operator read access.
type Holder struct {
	Session string `json:"session,omitempty"`
	Token   uint64 `json:"token"`
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	TTL       string `json:"ttl"`
	Name      string `json:"name,omitempty"`
	LockDelay string `json:"lock_delay,omitempty"`
}

// Session describes a session as returned by POST /v1/sessions.
type Session struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	TTL          string `json:"ttl"`
	LockDelay    string `json:"lock_delay"`
	CreatedIndex uint64 `json:"created_index"`
}

// SessionInfo describes a session with the locks it holds, as returned by the GET endpoints.
type SessionInfo struct {
	Session
	Locks []string `json:"locks"`
	// Waiting are the locks in whose queue the session waits, by name, and since when (an
	// addition to v1); absent when it waits for none.
	Waiting []SessionWait `json:"waiting,omitempty"`
	// ExpiresIn is how long until the leader frees the session unless a renewal arrives first
	// (a duration, to the millisecond). Only the leader knows it: absent from a stale read
	// answered by a follower, and for a session whose expiry is being committed.
	ExpiresIn string `json:"expires_in,omitempty"`
	// LastRenewal is when the leader received the session's last renewal (RFC 3339 with
	// nanoseconds, the leader's clock); absent when none arrived since the session was created
	// or since this leader took over (which restarts every lease at the full TTL), and where
	// ExpiresIn is.
	LastRenewal string `json:"last_renewal,omitempty"`
}

// SessionWait is one lock a session waits for (an addition to v1).
type SessionWait struct {
	Lock string `json:"lock"`
	// Since is when the session joined the queue: the leader's clock when it appended the
	// log entry that queued it, RFC 3339 with nanoseconds, UTC; absent when unknown (the
	// wait is older than the cluster's feature grant-times).
	Since string `json:"since,omitempty"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []SessionInfo `json:"sessions"`
}

// RenewResponse is the body of PUT /v1/sessions/{id}/renew.
type RenewResponse struct {
	ID  string `json:"id"`
	TTL string `json:"ttl"`
}

// RenewSessionsRequest is the body of POST /v1/sessions/renew: sessions to renew together.
type RenewSessionsRequest struct {
	IDs []string `json:"ids"`
}

// RenewSessionsResponse is the body of POST /v1/sessions/renew. Each requested id is in exactly
// one list: Renewed (the lease restarted at its TTL), NotFound (expired, destroyed or never
// existed; never revived) or Unknown (its expiry is being committed; ask again or read it).
type RenewSessionsResponse struct {
	Renewed  []RenewResponse `json:"renewed"`
	NotFound []string        `json:"not_found"`
	Unknown  []string        `json:"unknown"`
}

// DestroyResponse is the body of DELETE /v1/sessions/{id}.
type DestroyResponse struct {
	Released []string `json:"released"`
}

// AcquireRequest is the body of POST /v1/locks/{name}/acquire. Value is nil when absent, which
// keeps the stored value on a re-acquire by the holder.
type AcquireRequest struct {
	Session string  `json:"session,omitempty"`
	TTL     string  `json:"ttl,omitempty"`
	Wait    string  `json:"wait,omitempty"`
	Value   *string `json:"value,omitempty"`
	// Attempt names one try for the lock, shared by all its requests (an addition to v1); a
	// cancel that names it refuses its later requests. A session remembers only its last 16
	// cancelled string attempts: clients number their attempts instead (AttemptSeq).
	Attempt string `json:"attempt,omitempty"`
	// AttemptSeq numbers one try for the lock from a counter of the session (an addition to
	// v1, feature attempt-numbers): once a try of the lock numbered n ended (cancel or
	// release), every acquire of that lock by the session numbered n or less is refused.
	AttemptSeq uint64 `json:"attempt_seq,omitempty"`
	// AttemptFloor says that every try of the session numbered below it has ended (an
	// addition to v1, feature attempt-numbers): they are refused on every lock.
	AttemptFloor uint64 `json:"attempt_floor,omitempty"`
	// Limit makes the lock a semaphore that up to Limit sessions (1 to 1000) hold at once (an
	// addition to v1, feature semaphores-rwlocks for a limit above 1); nil for a lock, which
	// is a semaphore of 1.
	Limit *int `json:"limit,omitempty"`
	// Mode is ModeShared for a shared (read) hold, ModeExclusive or "" for an exclusive one (an
	// addition to v1, feature semaphores-rwlocks for shared).
	Mode string `json:"mode,omitempty"`
}

// AcquireResponse is the body of a granted acquire.
type AcquireResponse struct {
	Name    string `json:"name"`
	Session string `json:"session"`
	Token   uint64 `json:"token"`
	Value   string `json:"value"`
}

// ReleaseRequest is the body of POST /v1/locks/{name}/release. Session and Token are required.
type ReleaseRequest struct {
	Session string  `json:"session"`
	Token   *uint64 `json:"token"`
	// Attempt, if set, is the attempt of the acquire that won the lock: the release fences it,
	// so its requests still in flight are refused with attempt_cancelled.
	Attempt string `json:"attempt,omitempty"`
	// AttemptSeq and AttemptFloor are the numbered attempt of the acquire that won the lock,
	// which the release fences, and the session's floor, as in AcquireRequest.
	AttemptSeq   uint64 `json:"attempt_seq,omitempty"`
	AttemptFloor uint64 `json:"attempt_floor,omitempty"`
	// Force makes it an operator's forced release of the grant under Token, whoever holds it
	// (an addition to v1, feature force-release; operator:write under ACLs): Session may be
	// left out, and if given must be the holder's. The holding session ends, and every lock it
	// held stays unavailable for its TTL plus its lock-delay, so that its client stops
	// believing it holds them before anyone else is granted one.
	Force bool `json:"force,omitempty"`
}

// ReleaseResponse is the body of a successful release.
type ReleaseResponse struct {
	Released bool `json:"released"`
	// EndedSession, HeldBack and AvailableIn answer a forced release (additions to v1): the
	// session it ended, the locks that session held, now held back, and for how long (the
	// session's TTL plus its lock-delay, a Go duration).
	EndedSession string   `json:"ended_session,omitempty"`
	HeldBack     []string `json:"held_back,omitempty"`
	AvailableIn  string   `json:"available_in,omitempty"`
}

// CancelAcquireResponse answers DELETE /v1/locks/{name}/acquire?session=<id>[&attempt=<a>]: whether the
// session's place in the lock's queue was removed, and whether the session holds the lock (a
// grant that came before the cancel), with the grant's token.
type CancelAcquireResponse struct {
	Cancelled bool   `json:"cancelled"`
	Held      bool   `json:"held"`
	Token     uint64 `json:"token,omitempty"`
}

// Lock describes the state of one lock. When several sessions hold it (a semaphore, or
// shared holds), Session, Token and Value are those of the newest grant, and Holders lists
// them all.
type Lock struct {
	Name        string `json:"name"`
	Held        bool   `json:"held"`
	Session     string `json:"session"`
	Token       uint64 `json:"token"`
	Value       string `json:"value"`
	Waiters     int    `json:"waiters"`
	ModifyIndex uint64 `json:"modify_index"`
	// Limit is a semaphore's limit; absent for a lock (an addition to v1).
	Limit int `json:"limit,omitempty"`
	// Holders are every grant of a semaphore or of a lock held shared, oldest first; absent
	// for a lock held exclusively (described by the fields above) and for a free one (an
	// addition to v1).
	Holders []LockHolder `json:"holders,omitempty"`
	// Since is when the newest grant was made (an addition to v1): the leader's clock when it
	// appended the log entry that granted it, RFC 3339 with nanoseconds, UTC; absent when free
	// or unknown (a grant older than the cluster's feature grant-times).
	Since string `json:"since,omitempty"`
	// Queue is the lock's queue in order, the first to be granted first (an addition to v1);
	// absent when nobody waits, and in a prefix watch's changes (read the lock).
	Queue []LockWaiter `json:"queue,omitempty"`
}

// LockWaiter is one entry of a lock's queue (an addition to v1). Under ACLs, Session and Name
// are left out for a caller that neither owns the session nor has operator read access.
type LockWaiter struct {
	Session string `json:"session,omitempty"`
	// Name is the waiting session's name.
	Name string `json:"name,omitempty"`
	// Mode is ModeShared or ModeExclusive for a lock's waiter; absent for a semaphore's.
	Mode string `json:"mode,omitempty"`
	// Since is when it joined the queue, as Lock.Since.
	Since string `json:"since,omitempty"`
}

// LockHolder is one grant of a lock (an addition to v1). Under ACLs, Session is left out for
// a caller that neither owns the session nor has operator read access.
type LockHolder struct {
	Session string `json:"session,omitempty"`
	Token   uint64 `json:"token"`
	Value   string `json:"value"`
	// Mode is ModeShared or ModeExclusive for a lock's holder; absent for a semaphore's.
	Mode string `json:"mode,omitempty"`
	// Since is when it was granted, as Lock.Since (an addition to v1).
	Since string `json:"since,omitempty"`
}

// LockList is the body of GET /v1/locks.
type LockList struct {
	Locks []Lock `json:"locks"`
}

// CheckResponse is the body of GET /v1/locks/{name}/check.
type CheckResponse struct {
	Current bool   `json:"current"`
	Token   uint64 `json:"token"`
}

// Member describes one member of the cluster.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	// Version and Features are what the member last reported of itself to the leader (its
	// /v1/health); absent when the answering node has no report (an addition to v1).
	Version  string   `json:"version,omitempty"`
	Features []string `json:"features,omitempty"`
	// AppliedIndex is the last log index the member reported applying, and Lag how far that
	// was behind the leader's last index when the leader read it; absent without a report
	// (additions to v1).
	AppliedIndex *uint64 `json:"applied_index,omitempty"`
	Lag          *uint64 `json:"lag,omitempty"`
}

// Cluster is the body of GET /v1/cluster.
type Cluster struct {
	Version      string   `json:"version"`
	Leader       string   `json:"leader"`
	Term         uint64   `json:"term"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	Members      []Member `json:"members"`
	// LogStore is the answering node's Raft log store: "boltdb" or "wal" (an addition to v1).
	LogStore string `json:"log_store"`
	// Features are the features the cluster has enabled: every member supports them, and
	// requests may use them (an addition to v1).
	Features []string `json:"features"`
}

// Health is the body of GET /v1/health (fields beside status are additions to v1).
type Health struct {
	Status string `json:"status"`
	ID     string `json:"id"`
	// Version is this node's version, and Features the features it supports.
	Version  string   `json:"version"`
	Features []string `json:"features"`
	// ClusterFeatures are the features the cluster has enabled, as this node applied the log.
	ClusterFeatures []string `json:"cluster_features"`
	// AppliedIndex is the last log index this node applied.
	AppliedIndex uint64 `json:"applied_index"`
	// Suffrage is "voter" or "nonvoter" as this node's own latest Raft configuration has it,
	// or absent when that configuration does not name it (it was not added yet, or removed):
	// a node that names itself has received the log up to its own addition (an addition to
	// v1).
	Suffrage string `json:"suffrage,omitempty"`
	// FeatureGate is present on the leader only (an addition to v1): "settled" once it has
	// heard from every member and enabled every feature all of them support, "pending" while
	// it still waits for a member's answer or is about to enable features. A request that
	// needs a feature every member supports waits for it a few seconds rather than failing.
	FeatureGate string `json:"feature_gate,omitempty"`
	// Member is this node's view of the member named by ?member= (an addition to v1): a node
	// whose data directory is empty asks it before it bootstraps or joins under its id.
	Member *MemberView `json:"member,omitempty"`
}

// MemberView is what a node's own state says of one member (GET /v1/health?member=ID).
type MemberView struct {
	ID string `json:"id"`
	// Suffrage is "voter" or "nonvoter" in the node's latest Raft configuration, or absent
	// when it does not name the member.
	Suffrage string `json:"suffrage,omitempty"`
	// Started says the member has run in this cluster: it published its HTTP address.
	Started bool `json:"started"`
}

// AddMemberRequest is the body of POST /v1/cluster/members.
type AddMemberRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Suffrage is "voter" (the default) or "nonvoter": a non-voter replicates the log but
	// does not vote, until promoted (an addition to v1). A member that exists keeps its
	// suffrage.
	Suffrage string `json:"suffrage,omitempty"`
}

// Suffrages of AddMemberRequest and Member.
const (
	SuffrageVoter    = "voter"
	SuffrageNonvoter = "nonvoter"
)

// MembersResponse is the body of a successful membership change.
type MembersResponse struct {
	Members []Member `json:"members"`
	// Warning, if set, says what the new membership costs (an even number of voters; an
	// addition to v1).
	Warning string `json:"warning,omitempty"`
}

// RestoreResponse is the body of a successful PUT /v1/snapshot (an addition to v1).
type RestoreResponse struct {
	// Index is the log index of the restored state: every fencing token issued from now on
	// is greater.
	Index uint64 `json:"index"`
	// BackupIndex, BackupNode and BackupCreated come from the backup file's header.
	BackupIndex   uint64 `json:"backup_index"`
	BackupNode    string `json:"backup_node"`
	BackupCreated string `json:"backup_created"`
	// Sessions, Locks and ACLTokens count what was restored.
	Sessions  int `json:"sessions"`
	Locks     int `json:"locks"`
	ACLTokens int `json:"acl_tokens"`
}

// TransferRequest is the optional body of POST /v1/cluster/leadership-transfer.
type TransferRequest struct {
	ID string `json:"id,omitempty"`
}

// TransferResponse is the body of a successful leadership transfer.
type TransferResponse struct {
	Leader string `json:"leader"`
}
