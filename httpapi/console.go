package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/tlsutil"
)

// The console listener (ServeConsole, the agent's --console-addr) serves the web console and
// the API over HTTPS without asking for a client certificate, so that a browser reaches a
// cluster whose API port requires one without importing a certificate bundle. What replaces
// the certificate is the token: on that listener every /v1 request but GET /v1/openapi.yaml
// needs one (health and ready included), whatever the API port lets through without one, and
// nothing meant for the members alone is served there:
//   - a request marked as forwarded by another node (X-Raftlock-Forwarded) loses the mark, so
//     it is rate-limited, audited and forwarded like any client's;
//   - a member's publication of its address without a token (mayPublish) is refused like any
//     request without a token;
//   - the ACL bootstrap (which needs no token, once), a member's view of itself
//     (GET /v1/health?member=ID), /metrics and /debug/pprof/ are not served;
//   - Raft is not spoken there: it is an HTTP server only, as the Raft port is the members'.
// The limits of the API port apply (connections, with their own count; headers; bodies; rate;
// blocking queries), as does the audit log.

// consolePrefix is what the console listener serves besides the API under /v1: the console.
const consolePrefix = "/ui/"

// ServeConsole serves the console and the API on ln over TLS with cfg, a configuration that
// asks for no client certificate (tlsutil.Store.ConsoleServerConfig), until Shutdown or Close;
// it returns nil after them. It needs Config.ACL: without tokens, a listener that asks for no
// certificate would let anyone who reaches it act. It may be called once.
func (s *Server) ServeConsole(ln net.Listener, cfg *tls.Config) error {
	if !s.cfg.ACL || cfg == nil {
		ln.Close()
		return errors.New("httpapi: the console listener needs ACL and TLS")
	}
	if s.cfg.MaxConnections > 0 {
		ln = newLimitListener(ln, s.cfg.MaxConnections, func() { s.metrics.refuse(limitConnections) })
	}
	ln = tlsutil.NewListener(ln, cfg, tlsutil.ListenerOptions{
		HandshakeTimeout: s.cfg.HeaderReadTimeout, OnRefused: s.refusedConn})
	return s.serveBeside(ln, withConsolePeer, &s.console)
}

// withConsolePeer marks each connection of the console listener (http.Server.ConnContext).
func withConsolePeer(ctx context.Context, c net.Conn) context.Context {
	ctx = withConnPeer(ctx, c)
	if p, ok := ctx.Value(connPeerKey{}).(*connPeer); ok {
		p.console = true
	}
	return ctx
}

// onConsole says whether the request came through the console listener.
func onConsole(req *http.Request) bool {
	p, ok := req.Context().Value(connPeerKey{}).(*connPeer)
	return ok && p.console
}

// consoleGuard refuses, on the console listener, what is not the console or the API, and the
// API's routes that are the members' or need no token (see above). Elsewhere it does nothing.
func (s *Server) consoleGuard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if !onConsole(req) {
			return next(c)
		}
		p := req.URL.Path
		switch {
		case strings.HasPrefix(p, consolePrefix) && s.cfg.UI:
			return next(c)
		case p == "/v1/acl/bootstrap", p == "/v1/health" && req.URL.Query().Has("member"):
			s.dropBody(c)
			return forbidden("%s is not served on the console listener: use the API port", clip(p, maxLoggedPath))
		case strings.HasPrefix(p, "/v1/"):
			return next(c)
		}
		s.dropBody(c)
		return newError(http.StatusNotFound, api.CodeNotFound, "the console listener serves the console (/ui/) and the API (/v1/) only")
	}
}

// consoleNeedsToken says whether an open path (one that needs no token) needs one anyway
// because the request came through the console listener: all but the API's description.
func consoleNeedsToken(req *http.Request) bool {
	return onConsole(req) && req.URL.Path != "/v1/openapi.yaml"
}
