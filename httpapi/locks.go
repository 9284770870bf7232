package httpapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// lockRoute dispatches /v1/locks/{name}[/acquire|/release|/check]: names may contain '/', so
// the action is the last segment, which is why names may not end in one. DELETE on acquire
// cancels a session's wait (an addition to v1).
func (s *Server) lockRoute(c echo.Context) error {
	path, err := lockPath(c.Request())
	if err != nil {
		return err
	}
	name, action := splitAction(path)
	method := c.Request().Method
	want := http.MethodGet
	switch {
	case action == "acquire" && method == http.MethodDelete:
		want = http.MethodDelete
	case action == "acquire" || action == "release":
		want = http.MethodPost
	}
	if method != want {
		return echo.ErrMethodNotAllowed
	}
	if err := s.cfg.Limits.lockName(name); err != nil {
		return err
	}
	switch action {
	case "acquire":
		if method == http.MethodDelete {
			return s.cancelAcquire(c, name)
		}
		return s.acquire(c, name)
	case "release":
		return s.release(c, name)
	case "check":
		return s.check(c, name)
	}
	return s.getLock(c, name)
}

// splitAction splits a decoded lock path into the lock's name and its action (acquire, release,
// check, or "" for the lock itself).
func splitAction(path string) (name, action string) {
	if i := strings.LastIndexByte(path, '/'); i >= 0 && reservedActions[path[i+1:]] {
		return path[:i], path[i+1:]
	} else if reservedActions[path] {
		return "", path
	}
	return path, ""
}

// lockPath is the request path after /v1/locks/, percent-decoded exactly once from what arrived
// on the wire, so that a name whose slashes come encoded (jobs%2Fnightly) names the same lock as
// the plain path, and an encoded '%' stays a '%' (which the name rules refuse).
func lockPath(r *http.Request) (string, error) {
	esc := strings.TrimPrefix(r.URL.EscapedPath(), "/v1/locks/")
	p, err := url.PathUnescape(esc)
	if err != nil {
		return "", invalid("lock path %q is not valid percent-encoding", esc)
	}
	return p, nil
}

func (s *Server) acquire(c echo.Context, name string) error {
	var req api.AcquireRequest
	if err := s.decodeBody(c, &req, false); err != nil {
		return err
	}
	lim := &s.cfg.Limits
	args, err := s.acquireRequest(&req)
	if err != nil {
		return err
	}
	var id fsm.SessionID
	var ttl time.Duration
	switch {
	case req.Session != "" && req.TTL != "":
		return invalid("give either session or ttl, not both")
	case req.Session != "":
		if id, err = sessionID(req.Session); err != nil {
			return err
		}
	case req.TTL != "":
		if ttl, err = duration("ttl", req.TTL, lim.MinTTL, lim.MaxTTL); err != nil {
			return err
		}
	default:
		return invalid("session (or ttl, to create one) is required")
	}
	return s.atLeader(c, func() error {
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		if err := caller.lock(name, fsm.AccessWrite); err != nil {
			return err
		}
		if !id.IsZero() {
			if err := s.ownedSession(c, caller, id); err != nil {
				return err
			}
		}
		wait := args.Wait
		if max := lim.MaxWaitersPerLock; max > 0 && wait > 0 && s.queueFull(name, id, max) {
			return tooMany("lock %q has %d waiters, the configured maximum", name, max)
		}
		created := false
		if id.IsZero() {
			info, err := s.newSession(c, caller, "", ttl, 0)
			if err != nil {
				return err
			}
			id, created = info.ID, true
		}
		ctx, cancel := s.commandContext(c, wait)
		defer cancel()
		args.Session, args.Lock = id, name
		res, err := s.node.Acquire(ctx, args)
		if created && (err != nil || res.Status != fsm.StatusOK) {
			// The caller never learned the session's id: do not leave it holding a place.
			dctx, dcancel := s.commandContext(c, 0)
			_, _ = s.node.DestroySession(dctx, id)
			dcancel()
		}
		if err != nil {
			return fromClusterError(err)
		}
		if res.Status != fsm.StatusOK && wait > 0 {
			// A wait ends early when the token it was admitted under is deleted (which drops
			// its sessions' queue entries): say so rather than that the lock is held.
			if _, err := s.caller(c); err != nil {
				return err
			}
		}
		return s.acquireResult(c, caller, name, id, res)
	})
}

// queueFull reports whether a waiting acquire by session would take a place beyond the limit
// of max waiters. A holder (an idempotent re-acquire) and a session already queued (a client
// asking again after its request was cut off) take no new place, so they are never refused.
func (s *Server) queueFull(name string, session fsm.SessionID, max int) bool {
	f := s.node.FSM()
	if f.Lock(name).Waiters < max {
		return false
	}
	if _, held := f.HoldOf(name, session); held {
		return false
	}
	return session.IsZero() || !f.Queued(name, session)
}

func (s *Server) acquireResult(c echo.Context, caller *identity, name string, id fsm.SessionID, res fsm.Result) error {
	switch res.Status {
	case fsm.StatusOK:
		return c.JSON(http.StatusOK, api.AcquireResponse{Name: name, Session: id.String(), Token: res.Token, Value: res.Value})
	case fsm.StatusSessionNotFound:
		return sessionNotFound(id.String())
	case fsm.StatusLockDelayed:
		return lockDelayed(name, s.node.DelayLeft(name, res.DelayUntil))
	case fsm.StatusAttemptCancelled:
		return newError(http.StatusConflict, api.CodeAttemptCancelled, "this attempt for lock %q was cancelled", name)
	case fsm.StatusLimitMismatch:
		return limitMismatch(name, res.Limit)
	case fsm.StatusModeMismatch:
		return modeMismatch(name)
	case fsm.StatusInvalid: // acquireKind refuses these first
		return invalid("the limit or mode of this acquire of lock %q is not valid", name)
	}
	e := newError(http.StatusConflict, api.CodeLockHeld, "lock %q is held by another session", name)
	if !res.Holder.IsZero() {
		e.body.Holder = &api.Holder{Token: res.Token}
		if s.seesHolder(caller, res.Holder) {
			e.body.Holder.Session = res.Holder.String()
		}
	}
	return e
}

// cancelAcquire takes the session of ?session= out of the lock's queue; a grant that came first
// is reported (held, token), not undone. With ?attempt=, later acquires of that attempt fail.
func (s *Server) cancelAcquire(c echo.Context, name string) error {
	var empty struct{}
	if err := s.decodeBody(c, &empty, true); err != nil {
		return err
	}
	id, err := sessionID(c.QueryParam("session"))
	if err != nil {
		return err
	}
	seq, err := queryNumber(c, "attempt_seq")
	if err != nil {
		return err
	}
	floor, err := queryNumber(c, "attempt_floor")
	if err != nil {
		return err
	}
	try, err := numberedAttempt(c.QueryParam("attempt"), seq, floor, false)
	if err != nil {
		return err
	}
	return s.atLeader(c, func() error {
		if err := s.mayWriteAs(c, name, id); err != nil {
			return err
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		res, err := s.node.CancelAcquire(ctx, id, name, try)
		if err != nil {
			return fromClusterError(err)
		}
		switch res.Status {
		case fsm.StatusOK:
			return c.JSON(http.StatusOK, api.CancelAcquireResponse{Held: true, Token: res.Token})
		case fsm.StatusCancelled:
			return c.JSON(http.StatusOK, api.CancelAcquireResponse{Cancelled: true})
		case fsm.StatusNotQueued:
			return c.JSON(http.StatusOK, api.CancelAcquireResponse{})
		case fsm.StatusSessionNotFound:
			return sessionNotFound(id.String())
		}
		return fromClusterError(fmt.Errorf("httpapi: cancel-wait answered status %v", res.Status))
	})
}

func lockDelayed(name string, left time.Duration) error {
	left = left.Round(time.Millisecond)
	e := newError(http.StatusConflict, api.CodeLockDelayed, "lock %q is free but inside a lock-delay for %v", name, left)
	e.body.AvailableIn = left.String()
	return e
}

func (s *Server) release(c echo.Context, name string) error {
	var req api.ReleaseRequest
	if err := s.decodeBody(c, &req, false); err != nil {
		return err
	}
	if req.Token == nil {
		return invalid("token is required")
	}
	if req.Force {
		return s.forceRelease(c, name, &req)
	}
	id, err := sessionID(req.Session)
	if err != nil {
		return err
	}
	try, err := numberedAttempt(req.Attempt, req.AttemptSeq, req.AttemptFloor, false)
	if err != nil {
		return err
	}
	return s.atLeader(c, func() error {
		if err := s.mayWriteAs(c, name, id); err != nil {
			return err
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		res, err := s.node.Release(ctx, id, name, *req.Token, try)
		if err != nil {
			return fromClusterError(err)
		}
		switch res.Status {
		case fsm.StatusOK:
			return c.JSON(http.StatusOK, api.ReleaseResponse{Released: true})
		case fsm.StatusSessionNotFound:
			return sessionNotFound(id.String())
		}
		return newError(http.StatusConflict, api.CodeNotHolder, "session %s does not hold lock %q under token %d", id, name, *req.Token)
	})
}

// forceRelease answers an operator's forced release of the lock's grant under req.Token: the
// holding session ends and its locks are held back for its TTL plus its lock-delay (see
// cluster.Node.ForceRelease).
func (s *Server) forceRelease(c echo.Context, name string, req *api.ReleaseRequest) error {
	if req.Attempt != "" || req.AttemptSeq != 0 || req.AttemptFloor != 0 {
		return invalid("a forced release names a grant by its token alone: it takes no attempt")
	}
	var want fsm.SessionID
	if req.Session != "" {
		id, err := sessionID(req.Session)
		if err != nil {
			return err
		}
		want = id
	}
	return s.atLeader(c, func() error {
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		if err := caller.operator(fsm.AccessWrite); err != nil {
			return err
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		res, err := s.node.ForceRelease(ctx, name, *req.Token, want)
		if err != nil {
			return fromClusterError(err)
		}
		switch res.Status {
		case fsm.StatusOK:
			return c.JSON(http.StatusOK, api.ReleaseResponse{Released: true, EndedSession: res.Holder.String(),
				HeldBack: nonNilStrings(res.Released), AvailableIn: s.node.DelayLeft(name, res.DelayUntil).Round(time.Millisecond).String()})
		case fsm.StatusSessionNotFound, fsm.StatusNotHolder:
			if !want.IsZero() {
				return newError(http.StatusConflict, api.CodeNotHolder, "session %s does not hold lock %q under token %d", want, name, *req.Token)
			}
			return newError(http.StatusConflict, api.CodeNotHolder, "no grant of lock %q has token %d", name, *req.Token)
		}
		return fromClusterError(fmt.Errorf("httpapi: forced release answered status %v", res.Status))
	})
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func (s *Server) getLock(c echo.Context, name string) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	return s.read(c, q, func() error {
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		if err := caller.lock(name, fsm.AccessRead); err != nil {
			return err
		}
		v := s.node.FSM().LockView(name)
		if q.block && v.ModifyIndex <= q.index && q.wait > 0 {
			s.waitLockChange(c, name, q)
			if !q.stale {
				// The barrier before the wait proved this node led then; it may have been
				// deposed since, and its state would then miss what a newer leader changed.
				// Confirm again, and answer from the state as of now.
				if err := s.readBarrier(c); err != nil {
					return err
				}
			}
			v = s.node.FSM().LockView(name)
		}
		return c.JSON(http.StatusOK, s.lockViewBody(caller, v))
	})
}

// waitLockChange holds a blocking query until the lock's modify index exceeds q.index, the
// whole state is replaced (a snapshot restore, after which the lock's modify index may stay
// below q.index for good), the wait elapses or the client leaves, and returns the lock's
// state then.
func (s *Server) waitLockChange(c echo.Context, name string, q query) fsm.LockInfo {
	s.metrics.blocking.Inc()
	defer s.metrics.blocking.Dec()
	timer := time.NewTimer(q.wait)
	defer timer.Stop()
	restores := s.node.FSM().Restores()
	for {
		changed := s.node.WatchLock(name) // taken before the read, so no change is missed
		info := s.node.FSM().Lock(name)
		if info.ModifyIndex > q.index || s.node.FSM().Restores() != restores {
			return info
		}
		select {
		case <-changed:
		case <-timer.C:
			return s.node.FSM().Lock(name)
		case <-c.Request().Context().Done():
			return info
		case <-s.closing.Done():
			return info
		}
	}
}

func (s *Server) check(c echo.Context, name string) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	if c.QueryParam("token") == "" {
		return invalid("token is required")
	}
	token, err := queryNumber(c, "token")
	if err != nil {
		return err
	}
	return s.read(c, q, func() error {
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		if err := caller.lock(name, fsm.AccessRead); err != nil {
			return err
		}
		// Any grant's token is current: a semaphore's or a shared lock's holders each have one.
		v := s.node.FSM().LockView(name)
		return c.JSON(http.StatusOK, api.CheckResponse{Current: currentToken(v, token), Token: v.Token})
	})
}

func (s *Server) listLocks(c echo.Context) error {
	if wantsEventStream(c.Request()) {
		return s.watchStreamGet(c)
	}
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	prefix := c.QueryParam("prefix")
	if q.block {
		return s.watchLocks(c, q, prefix)
	}
	return s.read(c, q, func() error {
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		// Only the locks the caller may read; a policy may hide part of a prefix it shows.
		out := lockList{Locks: []any{}}
		for _, v := range s.node.FSM().LockViews(prefix) {
			if (v.Held || v.Waiters > 0) && caller.mayRead(v.Name) {
				out.Locks = append(out.Locks, s.lockViewBody(caller, v))
			}
		}
		return c.JSON(http.StatusOK, out)
	})
}

// lockList is api.LockList with each lock as lockBody answers it.
type lockList struct {
	Locks []any `json:"locks"`
}

// mayWriteAs refuses unless the caller may write the lock and owns the session.
func (s *Server) mayWriteAs(c echo.Context, name string, session fsm.SessionID) error {
	caller, err := s.caller(c)
	if err != nil {
		return err
	}
	if err := caller.lock(name, fsm.AccessWrite); err != nil {
		return err
	}
	return s.ownedSession(c, caller, session)
}
