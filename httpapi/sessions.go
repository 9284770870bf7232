package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

func (s *Server) createSession(c echo.Context) error {
	var req api.CreateSessionRequest
	if err := s.decodeBody(c, &req, false); err != nil {
		return err
	}
	lim := &s.cfg.Limits
	ttl, err := duration("ttl", req.TTL, lim.MinTTL, lim.MaxTTL)
	if err != nil {
		return err
	}
	delay, err := duration("lock_delay", req.LockDelay, 0, lim.MaxLockDelay)
	if err != nil {
		return err
	}
	if err := sessionName(req.Name); err != nil {
		return err
	}
	return s.atLeader(c, func() error {
		id, err := s.caller(c) // any token: the session is the token's
		if err != nil {
			return err
		}
		info, err := s.newSession(c, id, req.Name, ttl, delay)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, sessionBody(info))
	})
}

// newSession creates a session on the leader for the caller, within the configured session
// limits (the cluster's, and under ACL the token's).
func (s *Server) newSession(c echo.Context, id *identity, name string, ttl, delay time.Duration) (fsm.SessionInfo, error) {
	if max := s.cfg.Limits.MaxSessions; max > 0 && s.node.FSM().Stats().Sessions >= max {
		return fsm.SessionInfo{}, tooMany("the cluster holds %d sessions, the configured maximum", max)
	}
	if max := s.cfg.Limits.MaxSessionsPerToken; max > 0 && id != nil && s.node.FSM().SessionsOwnedBy(id.owner()) >= max {
		return fsm.SessionInfo{}, tooMany("this token owns %d sessions, the configured maximum per token", max)
	}
	ctx, cancel := s.commandContext(c, 0)
	defer cancel()
	info, err := s.node.CreateOwnedSession(ctx, id.owner(), name, ttl, delay)
	if err != nil {
		return info, fromClusterError(err)
	}
	return info, nil
}

func (s *Server) renewSession(c echo.Context) error {
	var empty struct{}
	if err := s.decodeBody(c, &empty, true); err != nil {
		return err
	}
	id, err := sessionID(c.Param("id"))
	if err != nil {
		return err
	}
	if s.batchesRenewal(c) {
		if handled, err := s.renewals.renew(c, id); handled {
			return err
		}
	}
	return s.atLeader(c, func() error {
		if err := s.callerOwns(c, id); err != nil {
			return err
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		ttl, err := s.node.Renew(ctx, id)
		if err != nil {
			return sessionOpError(err, id)
		}
		return c.JSON(http.StatusOK, api.RenewResponse{ID: id.String(), TTL: ttl.String()})
	})
}

// renewSessions renews many sessions in one request, for clients that keep many alive: one
// leadership confirmation serves them all.
func (s *Server) renewSessions(c echo.Context) error {
	var req api.RenewSessionsRequest
	if err := s.decodeBody(c, &req, false); err != nil {
		return err
	}
	if len(req.IDs) == 0 {
		return invalid("ids is required: the sessions to renew")
	}
	if max := s.cfg.Limits.MaxRenewBatch; len(req.IDs) > max {
		return invalid("ids has %d sessions; at most %d are renewed in one request", len(req.IDs), max)
	}
	// A malformed id names no session, as with PUT /v1/sessions/{id}/renew: it is not found.
	notFound, raws := []string{}, make([]string, 0, len(req.IDs))
	ids := make([]fsm.SessionID, 0, len(req.IDs))
	seen := make(map[string]struct{}, len(req.IDs))
	for _, raw := range req.IDs {
		if _, dup := seen[raw]; dup {
			return invalid("ids names session %q twice", raw)
		}
		seen[raw] = struct{}{}
		id, err := fsm.ParseSessionID(raw)
		if err != nil {
			notFound = append(notFound, raw)
			continue
		}
		ids, raws = append(ids, id), append(raws, raw)
	}
	return s.atLeader(c, func() error {
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		if err := s.ownsAll(caller, ids); err != nil {
			return err
		}
		resp := api.RenewSessionsResponse{Renewed: []api.RenewResponse{}, NotFound: notFound, Unknown: []string{}}
		if len(ids) > 0 {
			ctx, cancel := s.commandContext(c, 0)
			defer cancel()
			res, err := s.node.RenewMany(ctx, ids)
			if err != nil {
				return fromClusterError(err)
			}
			for i, r := range res {
				switch r.Status {
				case cluster.RenewOK:
					resp.Renewed = append(resp.Renewed, api.RenewResponse{ID: raws[i], TTL: r.TTL.String()})
				case cluster.RenewNotFound:
					resp.NotFound = append(resp.NotFound, raws[i])
				default:
					resp.Unknown = append(resp.Unknown, raws[i])
				}
			}
		}
		return c.JSON(http.StatusOK, resp)
	})
}

func (s *Server) destroySession(c echo.Context) error {
	id, err := sessionID(c.Param("id"))
	if err != nil {
		return err
	}
	return s.atLeader(c, func() error {
		if err := s.mayEnd(c, id); err != nil {
			return err
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		released, err := s.node.DestroySession(ctx, id)
		if err != nil {
			return sessionOpError(err, id)
		}
		if released == nil {
			released = []string{}
		}
		return c.JSON(http.StatusOK, api.DestroyResponse{Released: released})
	})
}

// mayEnd refuses unless the caller may end the session: its owner (see identity.owns), or an
// operator (operator:write), who acts on a stuck holder as Consul's operators invalidate a
// session. A session that does not exist is not found.
func (s *Server) mayEnd(c echo.Context, session fsm.SessionID) error {
	caller, err := s.caller(c)
	if err != nil {
		return err
	}
	// Its absence is answered as for any session operation, after a leadership confirmation.
	var fe *apiError
	if err := s.ownedSession(c, caller, session); errors.As(err, &fe) && fe.status == http.StatusForbidden {
		if caller.operator(fsm.AccessWrite) == nil {
			return nil
		}
		return forbidden("session %s belongs to another token: ending it needs the token that created it, or operator:write", session)
	} else if err != nil {
		return err
	}
	return nil
}

// ownsAll refuses unless the caller owns every session of ids that exists: one session of
// another token refuses the whole batch, and one that does not exist is left to be reported
// not found, as without ACLs. Without ACLs it looks nothing up.
func (s *Server) ownsAll(caller *identity, ids []fsm.SessionID) error {
	if caller == nil {
		return nil
	}
	for _, id := range ids {
		if info, ok := s.node.FSM().Session(id); ok {
			if err := caller.session(info); err != nil {
				return err
			}
		}
	}
	return nil
}

// callerOwns refuses unless the caller owns the session (or ACLs are off); a session that does
// not exist is not found.
func (s *Server) callerOwns(c echo.Context, session fsm.SessionID) error {
	id, err := s.caller(c)
	if err != nil {
		return err
	}
	return s.ownedSession(c, id, session)
}

// sessionOpError maps the error of an operation on session id, naming the session when it is gone.
func sessionOpError(err error, id fsm.SessionID) error {
	if errors.Is(err, cluster.ErrSessionNotFound) {
		return sessionNotFound(id.String())
	}
	return fromClusterError(err)
}

func (s *Server) getSession(c echo.Context) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	id, err := sessionID(c.Param("id"))
	if err != nil {
		return err
	}
	return s.read(c, q, func() error {
		caller, err := s.caller(c)
		if err != nil {
			return err
		}
		info, ok := s.node.FSM().Session(id)
		if !ok {
			return sessionNotFound(id.String())
		}
		if err := caller.session(info); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, s.withLease(sessionInfoBody(info), info.ID))
	})
}

func (s *Server) listSessions(c echo.Context) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	if wantsEventStream(c.Request()) {
		return s.streamView(c, q, "sessions", s.sessionsView)
	}
	return s.read(c, q, func() error {
		view, err := s.sessionsView(c)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, view)
	})
}

// sessionsView is the answer to GET /v1/sessions: every session for a caller with
// operator:read, otherwise the caller's own.
func (s *Server) sessionsView(c echo.Context) (any, error) {
	caller, err := s.caller(c)
	if err != nil {
		return nil, err
	}
	all := caller.operator(fsm.AccessRead) == nil // otherwise only the caller's own
	infos := s.node.FSM().Sessions()
	out := api.SessionList{Sessions: make([]api.SessionInfo, 0, len(infos))}
	for _, info := range infos {
		if all || caller.owns(info) {
			out.Sessions = append(out.Sessions, s.withLease(sessionInfoBody(info), info.ID))
		}
	}
	return out, nil
}

func sessionBody(info fsm.SessionInfo) api.Session {
	return api.Session{
		ID:           info.ID.String(),
		Name:         info.Name,
		TTL:          info.TTL.String(),
		LockDelay:    info.LockDelay.String(),
		CreatedIndex: info.CreateIndex,
	}
}

func sessionInfoBody(info fsm.SessionInfo) api.SessionInfo {
	locks := info.Locks
	if locks == nil {
		locks = []string{}
	}
	out := api.SessionInfo{Session: sessionBody(info), Locks: locks}
	for _, w := range info.Waiting {
		out.Waiting = append(out.Waiting, api.SessionWait{Lock: w.Lock, Since: timeText(w.Since)})
	}
	return out
}

// withLease adds what the leader's timer says of the session's lease, where this node holds it
// (it leads): the time left and the last renewal.
func (s *Server) withLease(body api.SessionInfo, id fsm.SessionID) api.SessionInfo {
	lease, ok := s.node.SessionLease(id)
	if !ok {
		return body
	}
	body.ExpiresIn = lease.Left.Round(time.Millisecond).String()
	if !lease.LastRenewal.IsZero() {
		body.LastRenewal = lease.LastRenewal.UTC().Format(time.RFC3339Nano)
	}
	return body
}
