package httpapi

import (
	"context"
	"crypto/tls"
	"net"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
)

// checkForwarded removes the X-Raftlock-Forwarded mark from a request that did not come from
// another node of the cluster. The rate limiter and the audit log skip marked requests (the
// node that forwarded them counted and recorded them), and a marked request is answered
// where it arrives, never forwarded again: a client that set the mark itself could otherwise
// send writes straight to the leader unlimited and unrecorded. With TLS only a connection
// with a node certificate of the cluster's CA may carry the mark; without TLS nothing can
// tell a node from a client, and the mark is believed (docs/security.md).
func (s *Server) checkForwarded(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Header.Get(api.HeaderForwarded) == "" || s.cfg.TLS == nil && !onConsole(req) {
			return next(c)
		}
		if onConsole(req) || !s.fromNode(c) {
			s.log.Debug("ignored X-Raftlock-Forwarded from a connection without a node certificate",
				"remote", remoteHost(req), "path", clip(req.URL.Path, maxLoggedPath))
			req.Header.Del(api.HeaderForwarded)
		}
		return next(c)
	}
}

// fromNode says whether the request's connection presented a node certificate of the CA. The
// answer is worked out once per connection (a forwarding node keeps its connection to the
// leader alive), against the CA bundle of that moment.
func (s *Server) fromNode(c echo.Context) bool {
	req := c.Request()
	state := requestTLS(req)
	if state == nil || s.cfg.IsNode == nil || onConsole(req) {
		return false
	}
	check := func() bool { return s.cfg.IsNode(state) }
	if p, ok := req.Context().Value(connPeerKey{}).(*connPeer); ok {
		p.once.Do(func() { p.node = check() })
		return p.node
	}
	return check()
}

// connPeer caches, for one connection, whether its client certificate is a node's.
type connPeer struct {
	once sync.Once
	node bool
	// console marks a connection of the console listener (ServeConsole), which never counts
	// as a node's.
	console bool
	// tls is the state of a connection that terminated TLS before net/http saw it (ServePeers).
	tls *tls.ConnectionState
}

type connPeerKey struct{}

// withConnPeer gives each connection's requests a shared connPeer (http.Server.ConnContext).
func withConnPeer(ctx context.Context, c net.Conn) context.Context {
	p := &connPeer{}
	if t, ok := c.(connTLS); ok {
		state := t.ConnectionState()
		p.tls = &state
	}
	return context.WithValue(ctx, connPeerKey{}, p)
}
