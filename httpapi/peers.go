package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"
)

// ServePeers serves the API on ln, a listener whose connections' TLS, if any, was terminated
// before they were accepted: the Raft port's HTTP side (cluster.Node.APIListener), through
// which the members of a cluster reach each other's API. Config.TLS does not apply to it, and
// a connection's TLS state is taken from the connection itself, so that a member's node
// certificate lets it mark requests it forwards. It returns nil after Shutdown or Close, and
// may be called once.
func (s *Server) ServePeers(ln net.Listener) error {
	return s.serveBeside(ln, withConnPeer, &s.peers)
}

// serveBeside serves the API on ln, a listener beside the API port's (the Raft port's peers,
// the console's), with the API port's limits on headers and idle connections, connCtx to mark
// its connections, and net/http's own error answers in JSON as on the API port. It keeps its
// server in *slot for stopPeers, and returns nil after Shutdown or Close.
func (s *Server) serveBeside(ln net.Listener, connCtx func(context.Context, net.Conn) context.Context, slot **http.Server) error {
	srv := &http.Server{
		Handler:           s.echo,
		MaxHeaderBytes:    s.cfg.MaxHeaderBytes,
		ReadHeaderTimeout: s.cfg.HeaderReadTimeout,
		IdleTimeout:       2 * time.Minute,
		ConnContext:       connCtx,
		ErrorLog:          s.echo.Server.ErrorLog,
	}
	s.peersMu.Lock()
	if s.peersClosed {
		s.peersMu.Unlock()
		ln.Close()
		return nil
	}
	*slot = srv
	s.peersMu.Unlock()
	err := srv.Serve(jsonErrorListener{ln, s})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// stopPeers shuts the peers' and the console's servers down (gracefully until ctx ends, or at
// once with a nil ctx).
func (s *Server) stopPeers(ctx context.Context) error {
	s.peersMu.Lock()
	s.peersClosed = true
	srvs := []*http.Server{s.peers, s.console}
	s.peersMu.Unlock()
	var errs []error
	for _, srv := range srvs {
		if srv == nil {
			continue
		}
		if ctx == nil {
			errs = append(errs, srv.Close())
			continue
		}
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// connTLS is a connection that carries its TLS state without being a *tls.Conn (a connection
// whose first bytes were read ahead, see cluster's port sharing).
type connTLS interface {
	ConnectionState() tls.ConnectionState
}

// requestTLS returns the request's TLS state: net/http's, or that of a connection that
// terminated TLS itself (recorded by withConnPeer).
func requestTLS(req *http.Request) *tls.ConnectionState {
	if req.TLS != nil {
		return req.TLS
	}
	if p, ok := req.Context().Value(connPeerKey{}).(*connPeer); ok {
		return p.tls
	}
	return nil
}
