package history

import (
	"fmt"
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
	// Read is a linearizable GET /v1/locks/{name}; Held, OutSession and OutToken describe it.
	Read Kind = "read"
	// Write is a write to the fenced resource with Token; ok if accepted, fail if rejected.
	Write Kind = "write"
	// Nemesis is the start or stop of a fault (Fault, Action, FaultID, Detail).
	Nemesis Kind = "nemesis"
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

	// Inputs.
	Session string `json:"session,omitempty"`
	Lock    string `json:"lock,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	Attempt string `json:"attempt,omitempty"`
	WaitNS  int64  `json:"wait_ns,omitempty"`
	TTLNS   int64  `json:"ttl_ns,omitempty"`
	// LockDelayNS is the lock-delay of a created session.
	LockDelayNS int64 `json:"lock_delay_ns,omitempty"`

	// Outputs. For an ok acquire OutSession/OutToken are the grant; for a read or a lock_held
	// refusal they are the holder.
	Status     int    `json:"status,omitempty"`
	Code       string `json:"code,omitempty"`
	Error      string `json:"error,omitempty"`
	Held       bool   `json:"held,omitempty"`
	OutSession string `json:"out_session,omitempty"`
	OutToken   uint64 `json:"out_token,omitempty"`

	// Nemesis fields.
	Fault   string `json:"fault,omitempty"`
	Action  string `json:"action,omitempty"`
	FaultID int    `json:"fault_id,omitempty"`
	Detail  string `json:"detail,omitempty"`
}

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
	if o.Attempt != "" {
		s += " attempt=" + o.Attempt
	}
	if o.Kind == Read || o.Kind == Cancel || o.Code == "lock_held" {
		s += fmt.Sprintf(" held=%v", o.Held || o.OutSession != "")
	}
	if o.OutSession != "" {
		s += " -> session=" + short(o.OutSession)
	}
	if o.OutToken != 0 {
		s += fmt.Sprintf(" -> token=%d", o.OutToken)
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
