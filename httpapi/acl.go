package httpapi

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// With Config.ACL, every /v1 request but the open ones carries a token, and each handler checks
// what the token's policies allow where it executes, against that node's replicated state: on
// the leader for writes and linearizable reads, on the node that answers a stale read. The node
// that receives a request judges its token from the headers alone, before any body is read
// (identify, then authenticate); a follower then forwards the request with its token header,
// and the leader checks it again.

// identity is who a request acts for: its token and what the token's policies allow. A nil
// *identity means ACLs are off, and allows everything.
type identity struct {
	token fsm.ACLToken
	authz fsm.Authorizer
}

// accessorKey is where identify leaves the accessor id that this node resolved, for the audit
// log and the rate limiter.
const accessorKey = "raftlock.accessor"

// openPaths need no token: health checks, the API's description, and the bootstrap that
// creates the first token; on the console listener, all but the description need one (or are
// not served there).
var openPaths = map[string]bool{"/v1/health": true, "/v1/ready": true, "/v1/openapi.yaml": true, "/v1/acl/bootstrap": true}

// requestSecret returns the token secret a request carries in X-Raftlock-Token or, failing
// that, as "Authorization: Bearer <secret>"; "" if none.
func requestSecret(r *http.Request) string {
	if s := strings.TrimSpace(r.Header.Get(api.HeaderToken)); s != "" {
		return s
	}
	scheme, rest, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if ok && strings.EqualFold(scheme, "Bearer") {
		return strings.TrimSpace(rest)
	}
	return ""
}

// headerAccessor carries, from the leader back to a node that forwarded a request, the
// accessor id of the token the leader resolved for it, so that the forwarding node's audit
// entry names it even when that node has not applied the token yet. The forwarding node
// believes it only in the leader's answer on its own forwarding connection, and removes it
// from the answer it passes on.
const headerAccessor = "X-Raftlock-Accessor"

// identify resolves the token a request carries, from its headers alone, against this node's
// state, and records its accessor id for the rate limiter and the audit log. It refuses
// nothing: authenticate does, after the rate limiter has counted the request. A request another
// node forwarded gets the accessor id back in headerAccessor.
func (s *Server) identify(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if secret := requestSecret(req); secret != "" {
			if tok, _, ok := s.node.ResolveToken(secret); ok {
				c.Set(accessorKey, tok.AccessorID)
				if req.Header.Get(api.HeaderForwarded) != "" {
					c.Response().Header().Set(headerAccessor, tok.AccessorID)
				}
			}
		}
		return next(c)
	}
}

// authenticate refuses a /v1 request that needs a token and carries none (401), but a node's
// one-time publication of its own address (mayPublish). A token this node knows goes on where
// its answer is final (see final). A token's absence is answered (401) only from state
// confirmed current: by the leader, after a read barrier that proves it still leads and has
// applied everything committed (a node that just restarted, or won an election, may not have
// replayed its log yet, and a follower may be behind), as a session's absence is. So a node
// whose state may lag sends the request on to the leader (a stale read included), and one
// that cannot, a request forwarded to it that it no longer leads, answers 503, which a client
// retries: a client takes 401 as final and ends its watch, session or lock. A refused
// request's body is never read, and its connection is closed after the answer, as is that of
// any request without a token: a client that is not authenticated keeps no connection open.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		secret := requestSecret(req)
		if secret == "" {
			c.Response().Header().Set(echo.HeaderConnection, "close")
		}
		if !strings.HasPrefix(req.URL.Path, "/v1/") || openPaths[req.URL.Path] && !consoleNeedsToken(req) {
			return next(c)
		}
		switch {
		case secret == "" && s.mayPublish(c):
			return next(c)
		case secret == "":
			s.dropBody(c)
			return unauthorized("this request needs a token: send it as X-Raftlock-Token or Authorization: Bearer")
		case accessorOf(c) != "" && s.final(req):
			return next(c)
		case streamedWatch(req):
			// Served by the node that received it, which judges the token itself once it has
			// applied the log as far as the stream's starting point (serveStream).
			return next(c)
		}
		return s.atLeader(c, func() error { // forwards, unless this node leads by now
			if _, _, ok := s.node.ResolveToken(secret); ok {
				return next(c)
			}
			if err := s.readBarrier(c); err != nil {
				return err // 503: not (or not yet) the leader with its state current
			}
			if _, _, ok := s.node.ResolveToken(secret); !ok {
				s.dropBody(c)
				return errUnknownToken()
			}
			return next(c)
		})
	}
}

// mayPublish says whether a request without a token may go on as a member's one-time
// publication of its HTTP address (firstPublication decides): only POST /v1/cluster/members,
// and with TLS only from a connection with a node certificate of the cluster's CA, so that no
// client learns anything about the members from its answer.
func (s *Server) mayPublish(c echo.Context) bool {
	req := c.Request()
	return req.Method == http.MethodPost && req.URL.Path == "/v1/cluster/members" && !onConsole(req) &&
		(s.cfg.TLS == nil || s.fromNode(c))
}

// final says whether this node's answer to the request is final: it leads, the request was
// forwarded to it, or it is a stale read, which the receiving node answers from its own state.
func (s *Server) final(req *http.Request) bool {
	return s.node.IsLeader() || req.Header.Get(api.HeaderForwarded) != "" || staleRead(req)
}

func errUnknownToken() error {
	return unauthorized("the token is unknown (never created, or deleted)")
}

// staleRead says whether the request is a read that the receiving node answers from its own
// state (?consistency=stale).
func staleRead(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL.Query().Get("consistency") == "stale"
}

// accessorOf returns the accessor id identify resolved for the request, or "".
func accessorOf(c echo.Context) string {
	a, _ := c.Get(accessorKey).(string)
	return a
}

// caller returns who the request acts for, resolved from this node's state now: nil when
// ACLs are off; 401 unauthorized for a missing or unknown token.
func (s *Server) caller(c echo.Context) (*identity, error) {
	if !s.cfg.ACL {
		return nil, nil
	}
	secret := requestSecret(c.Request())
	if secret == "" {
		return nil, unauthorized("this request needs a token: send it as X-Raftlock-Token or Authorization: Bearer")
	}
	tok, authz, ok := s.node.ResolveToken(secret)
	if !ok {
		return nil, errUnknownToken()
	}
	return &identity{token: tok, authz: authz}, nil
}

// owner is the accessor id that new sessions of the caller belong to; "" without ACLs.
func (id *identity) owner() string {
	if id == nil {
		return ""
	}
	return id.token.AccessorID
}

// lock refuses unless the caller has at least want on the named lock.
func (id *identity) lock(name string, want fsm.Access) error {
	if id == nil || id.authz.Lock(name) >= want {
		return nil
	}
	return forbidden("this request needs %s access to lock %q", want, name)
}

// mayRead says whether the caller may read the named lock.
func (id *identity) mayRead(name string) bool { return id.lock(name, fsm.AccessRead) == nil }

// operator refuses unless the caller has at least want on the cluster.
func (id *identity) operator(want fsm.Access) error {
	if id == nil || id.authz.Operator() >= want {
		return nil
	}
	return forbidden("this request needs operator:%s", want)
}

// management refuses unless the caller has the management policy.
func (id *identity) management() error {
	if id == nil || id.authz.Management() {
		return nil
	}
	return forbidden("this request needs the %s policy", fsm.ManagementPolicy)
}

// owns says whether the caller may act for the session: it is the token that created it, or
// it has the management policy. A session made without ACLs (no owner) is management's alone.
func (id *identity) owns(info fsm.SessionInfo) bool {
	return id == nil || id.authz.Management() || info.Owner != "" && info.Owner == id.token.AccessorID
}

// session refuses unless the caller owns the session (see owns).
func (id *identity) session(info fsm.SessionInfo) error {
	if id.owns(info) {
		return nil
	}
	return forbidden("session %s belongs to another token: this request needs the token that created it, or the %s policy",
		info.ID, fsm.ManagementPolicy)
}

// ownedSession refuses unless the session exists (404) and the caller owns it (403). It runs
// on the leader: a session's absence is answered only once the leadership is confirmed after
// the request arrived, since a deposed leader that does not know it yet may lack a session
// created through its successor, and a client takes 404 as final and drops the session.
func (s *Server) ownedSession(c echo.Context, id *identity, session fsm.SessionID) error {
	if id == nil {
		return nil
	}
	info, ok := s.node.FSM().Session(session)
	if !ok {
		if err := s.readBarrier(c); err != nil {
			return err
		}
		if info, ok = s.node.FSM().Session(session); !ok {
			return sessionNotFound(session.String())
		}
	}
	return id.session(info)
}

// seesHolder says whether the caller may see the id of the session holding a lock: its owner
// and tokens with operator read access may; others see the holder without it.
func (s *Server) seesHolder(id *identity, holder fsm.SessionID) bool {
	if id == nil || id.authz.Operator() >= fsm.AccessRead {
		return true
	}
	info, ok := s.node.FSM().Session(holder)
	return ok && id.owns(info)
}
