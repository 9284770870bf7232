package httpapi

import (
	"net/http"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// acquireRequest checks an acquire body's wait, value, attempt, limit and mode, and returns
// them as the cluster takes them (the handler fills in the session and the lock).
func (s *Server) acquireRequest(req *api.AcquireRequest) (cluster.AcquireRequest, error) {
	var a cluster.AcquireRequest
	lim := &s.cfg.Limits
	wait, err := duration("wait", req.Wait, 0, lim.MaxWait)
	if err != nil {
		return a, err
	}
	if req.Value != nil {
		if err := lim.value(*req.Value); err != nil {
			return a, err
		}
		a.Value, a.SetValue = *req.Value, true
	}
	try, err := numberedAttempt(req.Attempt, req.AttemptSeq, req.AttemptFloor, true)
	if err != nil {
		return a, err
	}
	limit, shared, err := acquireKind(req)
	if err != nil {
		return a, err
	}
	a.Wait, a.Attempt, a.Limit, a.Shared = wait, try, limit, shared
	return a, nil
}

// acquireKind reads the limit and mode of an acquire body. A limit of 1 is a lock's, as no
// limit is, so that it needs no feature.
func acquireKind(req *api.AcquireRequest) (limit uint32, shared bool, err error) {
	if req.Limit != nil {
		if n := *req.Limit; n < 1 || n > fsm.MaxLimit {
			return 0, false, invalid("limit %d is out of range: a semaphore's limit is between 1 and %d", n, fsm.MaxLimit)
		}
		if *req.Limit > 1 {
			limit = uint32(*req.Limit)
		}
	}
	switch req.Mode {
	case "", api.ModeExclusive:
	case api.ModeShared:
		shared = true
	default:
		return 0, false, invalid("mode %q is not %q or %q", req.Mode, api.ModeExclusive, api.ModeShared)
	}
	if shared && limit > 0 {
		return 0, false, invalid("mode %q is for locks: a semaphore (limit %d) has no shared holds", api.ModeShared, limit)
	}
	return limit, shared, nil
}

// limitMismatch answers an acquire whose limit is not the lock's.
func limitMismatch(name string, limit uint32) error {
	e := newError(http.StatusConflict, api.CodeLimitMismatch, "lock %q is used with limit %d while it has holders, waiters or lock-delays", name, limit)
	e.body.Limit = int(limit)
	return e
}

// modeMismatch answers an acquire in the other mode than the session's hold or queue entry.
func modeMismatch(name string) error {
	return newError(http.StatusConflict, api.CodeModeMismatch,
		"this session holds or waits for lock %q in the other mode (shared or exclusive): release it or cancel the wait first", name)
}

// redactedLock is api.Lock without the newest holder's session, for a caller that may not see
// it: the token and value remain, so that fencing still works, and each of the holders is
// redacted alike.
type redactedLock struct {
	Name        string           `json:"name"`
	Held        bool             `json:"held"`
	Token       uint64           `json:"token"`
	Value       string           `json:"value"`
	Waiters     int              `json:"waiters"`
	ModifyIndex uint64           `json:"modify_index"`
	Limit       int              `json:"limit,omitempty"`
	Holders     []api.LockHolder `json:"holders,omitempty"`
	Since       string           `json:"since,omitempty"`
	Queue       []api.LockWaiter `json:"queue,omitempty"`
}

// lockViewBody describes a lock and its grants to the caller: an api.Lock, or a redactedLock
// when the newest grant's session is one whose id the caller may not see. A semaphore's or a
// shared lock's holders are listed, each holder's session shown only to callers that may see
// it; a lock held exclusively is described by its top-level fields alone, as before holders
// were listed, so that its value is not sent twice.
func (s *Server) lockViewBody(caller *identity, v fsm.LockView) any {
	var holders []api.LockHolder
	if len(v.Holders) > 0 && (v.Limit > 0 || v.Shared) {
		holders = make([]api.LockHolder, len(v.Holders))
	} else {
		v.Holders = nil
	}
	for i, h := range v.Holders {
		holders[i] = api.LockHolder{Token: h.Token, Value: h.Value, Since: timeText(h.Since)}
		if v.Limit == 0 {
			holders[i].Mode = modeName(h.Shared)
		}
		if s.seesHolder(caller, h.Session) {
			holders[i].Session = h.Session.String()
		}
	}
	var queue []api.LockWaiter
	if len(v.Queue) > 0 {
		queue = make([]api.LockWaiter, len(v.Queue))
	}
	for i, w := range v.Queue {
		queue[i] = api.LockWaiter{Since: timeText(w.Since)}
		if v.Limit == 0 {
			queue[i].Mode = modeName(w.Shared)
		}
		if s.seesHolder(caller, w.Session) {
			queue[i].Session, queue[i].Name = w.Session.String(), w.Name
		}
	}
	since := timeText(v.Since)
	if v.Held && !s.seesHolder(caller, v.Holder) {
		return redactedLock{Name: v.Name, Held: true, Token: v.Token, Value: v.Value, Waiters: v.Waiters,
			ModifyIndex: v.ModifyIndex, Limit: int(v.Limit), Holders: holders, Since: since, Queue: queue}
	}
	l := api.Lock{Name: v.Name, Held: v.Held, Token: v.Token, Value: v.Value, Waiters: v.Waiters,
		ModifyIndex: v.ModifyIndex, Limit: int(v.Limit), Holders: holders, Since: since, Queue: queue}
	if v.Held {
		l.Session = v.Holder.String()
	}
	return l
}

// timeText is a grant's or queue entry's time (Unix ns) as the API gives it: RFC 3339 with
// nanoseconds, UTC; "" when unknown (0).
func timeText(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

func modeName(shared bool) string {
	if shared {
		return api.ModeShared
	}
	return api.ModeExclusive
}

// currentToken reports whether token is the token of one of v's grants.
func currentToken(v fsm.LockView, token uint64) bool {
	for _, h := range v.Holders {
		if h.Token == token {
			return true
		}
	}
	return false
}
