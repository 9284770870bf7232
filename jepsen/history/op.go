package history

import (
	"fmt"
	"strings"
	"time"
)

// Type is the outcome of an operation.
type Type string

// Outcomes. An info outcome is unknown: the operation may have taken effect, at any time after
// its invocation, or never.
const (
	OK   Type = "ok"
	Fail Type = "fail"
	Info Type = "info"
)

// Kind names what an operation did.
type Kind string

// Operation kinds.
const (
	// CreateSession is POST /v1/sessions; Session holds the new id on ok.
	CreateSession Kind = "create_session"
	// Renew is PUT /v1/sessions/{id}/renew.
	Renew Kind = "renew"
	// Destroy is DELETE /v1/sessions/{id}.
	Destroy Kind = "destroy"
	// Acquire is POST /v1/locks/{name}/acquire; Wait is the requested wait, Attempt names the
	// try, OutToken is the grant.
	Acquire Kind = "acquire"
	// Cancel is DELETE /v1/locks/{name}/acquire of Session's Attempt: after it, that attempt
	// takes no effect. On ok, Held and OutToken say whether a grant came first.
	Cancel Kind = "cancel"
	// Release is POST /v1/locks/{name}/release with Token.
	Release Kind = "release"
	// Read is a linearizable GET /v1/locks/{name}; Held, OutSession and OutToken describe it,
	// OutIndex is its modify_index. A blocking read (WaitNS > 0) asked with ?index=Index&wait.
	// The Go client's reads (GetLock, Election.Leader) are recorded as reads too, without Node.
	Read Kind = "read"
	// Write is a write to the fenced resource with Token; ok if accepted, fail if rejected.
	// Unchecked marks a write to a resource that does not check tokens (always accepted).
	Write Kind = "write"
	// ClientSession is a session created through the Go client (client.Client.NewSession):
	// its requests are not recorded one by one, so the linearizability model lets it take and
	// leave locks at any moment.
	ClientSession Kind = "client_session"
	// ClientAcquire is a call of the Go client that takes a lock (API: Mutex.Lock,
	// Mutex.TryLock or Election.Campaign), with its wait; ok with OutToken, fail for a refusal
	// (lock_held naming OutSession/OutToken, lock_delayed), info otherwise (the call gave up
	// or the session was lost: the lock may have been granted and given back).
	ClientAcquire Kind = "client_acquire"
	// Believe is the interval in which a Go-client worker believed it held Lock under OutToken
	// (taken through API): from the moment Lock, TryLock or Campaign returned success
	// (Invoke) to the moment the hold's context was done or Unlock or Resign began (Complete).
	// Detail says how it ended.
	Believe Kind = "believe"
	// ClientRelease is a Go-client worker's call that gives a lock back (API: the hold's, lock
	// or trylock for Mutex.Unlock, campaign for Election.Resign) under Token. It is ok only
	// when Unlock returned nil: the release was acknowledged and nothing of the Mutex's earlier
	// attempts on the lock is left to withdraw. Otherwise (info) the client may go on releasing
	// or withdrawing in the background while the session lives; Resign does not say which, so
	// it is always info.
	ClientRelease Kind = "client_release"
	// ClientSessionEnd is when a Go-client worker stopped using Session: it began closing it,
	// or the client found it lost (Session.Done closed), whichever came first; Detail says which.
	// It proves nothing about the server, where a lost session may live on until it expires.
	ClientSessionEnd Kind = "client_session_end"
	// Observe is a leader reported by client.Client.Observe: Lock held by OutSession under
	// OutToken at some instant between Invoke (when the observer began waiting for this
	// report) and Complete (when it received it); or, with Held false, a vacancy: Lock free at
	// such an instant.
	Observe Kind = "observe"
	// WatchChange is one change a prefix watcher received (GET /v1/locks?prefix=&index=Index):
	// Lock as it was right after the command at OutIndex (Held, OutSession, OutToken), in the
	// answer to the request sent at Invoke and received at Complete. Detail "reset" marks a
	// lock listed by a reset answer (the whole prefix), which follows its WatchReset.
	WatchChange Kind = "watch_change"
	// WatchReset is an answer that told a watcher to take the whole prefix (reset): it asked
	// from Index and goes on from OutIndex; the changes in between are not delivered one by
	// one. The locks it listed follow as WatchChange ops with Detail "reset"; one it left out
	// is free.
	WatchReset Kind = "watch_reset"
	// WatchEnd is the end of a watcher: ok once its index reached OutIndex, the index of a
	// linearizable watch answer asked at Invoke (after the workload stopped), so that it has
	// been told of every change acknowledged before Invoke; info if it could not get there.
	WatchEnd Kind = "watch_end"
	// HoldWait is a call of a semaphore or read/write-lock worker that takes a hold (API:
	// APIPermit for Semaphore.Acquire or TryAcquire, APIShared for RWMutex.RLock or TryRLock,
	// APIExclusive for RWMutex.Lock or TryLock) of Lock with Limit (a semaphore's), waiting
	// WaitNS (0: a try): ok with OutToken, fail for a refusal, info when the call gave up or
	// the session was lost.
	HoldWait Kind = "hold_wait"
	// Hold is the interval in which a semaphore or read/write-lock worker believed it held
	// Lock under OutToken (API and Limit as HoldWait's): from the moment the call returned
	// (Invoke) until the hold's context was done or its release began (Complete). Detail says
	// how it ended, and whether the worker paused while it held.
	Hold Kind = "hold"
	// HoldAccess is an access to the resource of a semaphore or read/write lock under Token
	// (API: APIPermit a semaphore holder's write, APIShared a read, APIExclusive a write):
	// ok if the resource accepted it, fail if it refused it. Each is recorded while the
	// resource is locked, so the IDs give the order the resource saw them in. Detail "stale"
	// marks one made after the worker paused past the end of its hold.
	HoldAccess Kind = "hold_access"
	// Nemesis is the start or stop of a fault (Fault, Action, FaultID, Detail).
	Nemesis Kind = "nemesis"
	// Canary is a write the nemesis makes, through the leader, while a power cut is about to
	// strike (FaultID): API names it, CanarySession (Session is the new session),
	// CanaryGrant (Lock, Session, OutToken), CanaryRelease (Lock, Session, Token) or, with
	// ACLs on, CanaryACL (Detail is the new policy). Every acknowledged one must survive the
	// power cut.
	Canary Kind = "canary"
	// Audit is what a linearizable read showed once the cluster was back from a power cut
	// (FaultID): with Lock, that lock's state (Held, OutSession, OutToken, and its
	// modify_index in OutIndex); with API CanaryACL, the ACL policies that exist (Detail,
	// space-separated); otherwise the sessions that exist (Sessions) and the applied index of
	// the node that answered (OutIndex).
	Audit Kind = "audit"
)

// The holds of semaphore and read/write-lock workers (Op.API of HoldWait, Hold, HoldAccess).
const (
	APIPermit    = "permit"
	APIShared    = "shared"
	APIExclusive = "exclusive"
)

// Canary writes (Op.API of a Canary op).
const (
	CanarySession = "session"
	CanaryGrant   = "grant"
	CanaryRelease = "release"
	CanaryACL     = "acl"
)

// Nemesis actions.
const (
	ActionStart = "start"
	ActionStop  = "stop"
	ActionEvent = "event"
)

// Phases of a run. Ops of the final phase are the liveness probes taken after every fault healed.
const (
	PhaseMain  = ""
	PhaseFinal = "final"
)

// Op is one recorded operation. Times are nanoseconds on the run's monotonic clock.
type Op struct {
	ID       int    `json:"id"`
	Process  int    `json:"process"`
	Kind     Kind   `json:"kind"`
	Type     Type   `json:"type"`
	Invoke   int64  `json:"invoke_ns"`
	Complete int64  `json:"complete_ns"`
	Phase    string `json:"phase,omitempty"`
	Node     string `json:"node,omitempty"`
	// AtFollower marks an answered read whose node named another node as the leader in its
	// answer (X-Raftlock-Leader): a read sent to a follower, which answers a linearizable read
	// of the locks itself (forwarded whole to the leader by builds before follower reads).
	AtFollower bool `json:"at_follower,omitempty"`

	// Inputs.
	Session string `json:"session,omitempty"`
	Lock    string `json:"lock,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	Attempt string `json:"attempt,omitempty"`
	WaitNS  int64  `json:"wait_ns,omitempty"`
	TTLNS   int64  `json:"ttl_ns,omitempty"`
	// LockDelayNS is the lock-delay of a created session.
	LockDelayNS int64 `json:"lock_delay_ns,omitempty"`
	// Index is the ?index of a blocking read.
	Index uint64 `json:"index,omitempty"`
	// API is the client call that took a believed lock: lock, trylock or campaign.
	API string `json:"api,omitempty"`
	// Unchecked marks a write to a resource that does not check fencing tokens.
	Unchecked bool `json:"unchecked,omitempty"`
	// Limit is the limit of a semaphore's hold.
	Limit int `json:"limit,omitempty"`

	// Outputs. For an ok acquire OutSession/OutToken are the grant; for a read or a lock_held
	// refusal they are the holder.
	Status     int    `json:"status,omitempty"`
	Code       string `json:"code,omitempty"`
	Error      string `json:"error,omitempty"`
	Held       bool   `json:"held,omitempty"`
	OutSession string `json:"out_session,omitempty"`
	OutToken   uint64 `json:"out_token,omitempty"`
	// OutIndex is the modify_index a read answered.
	OutIndex uint64 `json:"out_index,omitempty"`
	// Sessions are the ids of the sessions an audit found, separated by spaces.
	Sessions string `json:"sessions,omitempty"`

	// Nemesis fields; Detail also says how a belief ended.
	Fault   string `json:"fault,omitempty"`
	Action  string `json:"action,omitempty"`
	FaultID int    `json:"fault_id,omitempty"`
	Detail  string `json:"detail,omitempty"`
	// Build is the build Node runs from this nemesis op on (BuildOld or BuildNew), set by the
	// upgrade nemesis for each node as it starts and as it restarts one on another build.
	Build string `json:"build,omitempty"`
	// Features, on an upgrade nemesis event with Node, are the features the cluster had
	// enabled as Node applied the log, read between Invoke and Complete, separated by commas;
	// "-" for none.
	Features string `json:"features,omitempty"`
	// NewFeatures, on an upgrade nemesis op, are the features the new build supports and the
	// old one does not, separated by commas: none of them may be enabled while a member runs
	// the old build.
	NewFeatures string `json:"new_features,omitempty"`
}

// FeatureList splits an Op.Features or Op.NewFeatures value into its features.
func FeatureList(s string) []string {
	if s == "" || s == "-" {
		return nil
	}
	return strings.Split(s, ",")
}

// Builds of a node in an upgrade run (Op.Build).
const (
	BuildOld = "old"
	BuildNew = "new"
)

// Wait is the requested wait of an acquire.
func (o Op) Wait() time.Duration { return time.Duration(o.WaitNS) }

// TTL is the TTL of a created session.
func (o Op) TTL() time.Duration { return time.Duration(o.TTLNS) }

// LockDelay is the lock-delay of a created session.
func (o Op) LockDelay() time.Duration { return time.Duration(o.LockDelayNS) }

// Duration is how long the operation was outstanding.
func (o Op) Duration() time.Duration { return time.Duration(o.Complete - o.Invoke) }

// String renders the op on one line for reports.
func (o Op) String() string {
	at := fmt.Sprintf("#%d p%d [%s..%s]", o.ID, o.Process, fmtNS(o.Invoke), fmtNS(o.Complete))
	if o.Kind == Nemesis {
		return fmt.Sprintf("%s nemesis %s %s (fault %d) %s", at, o.Fault, o.Action, o.FaultID, o.Detail)
	}
	s := fmt.Sprintf("%s %s %s", at, o.Kind, o.Type)
	if o.Lock != "" {
		s += " lock=" + o.Lock
	}
	if o.Session != "" {
		s += " session=" + short(o.Session)
	}
	if o.Token != 0 {
		s += fmt.Sprintf(" token=%d", o.Token)
	}
	if o.WaitNS != 0 {
		s += " wait=" + o.Wait().String()
	}
	if o.Index != 0 {
		s += fmt.Sprintf(" index=%d", o.Index)
	}
	if o.API != "" {
		s += " api=" + o.API
	}
	if o.Unchecked {
		s += " unchecked"
	}
	if o.Limit != 0 {
		s += fmt.Sprintf(" limit=%d", o.Limit)
	}
	if o.Attempt != "" {
		s += " attempt=" + o.Attempt
	}
	if o.Kind == Read || o.Kind == Cancel || o.Code == "lock_held" || o.Kind == Observe {
		s += fmt.Sprintf(" held=%v", o.Held || o.OutSession != "")
	}
	if o.OutSession != "" {
		s += " -> session=" + short(o.OutSession)
	}
	if o.OutToken != 0 {
		s += fmt.Sprintf(" -> token=%d", o.OutToken)
	}
	if o.OutIndex != 0 {
		s += fmt.Sprintf(" -> index=%d", o.OutIndex)
	}
	if o.Code != "" {
		s += " code=" + o.Code
	}
	if o.Error != "" {
		s += " err=" + o.Error
	}
	if o.Node != "" {
		s += " node=" + o.Node
	}
	if o.Phase != "" {
		s += " phase=" + o.Phase
	}
	if o.Detail != "" {
		s += " (" + o.Detail + ")"
	}
	return s
}

func fmtNS(ns int64) string {
	return fmt.Sprintf("%.3fs", float64(ns)/1e9)
}

// short abbreviates a 32-hex-character session id for humans.
func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
