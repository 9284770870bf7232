package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/tlsutil"
)

// forwarder relays requests from a follower to the leader over pooled keep-alive connections,
// over HTTPS with this node's certificate when Config.ForwardTLS is set.
type forwarder struct {
	s         *Server
	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

type leaderKey struct{}

func newForwarder(s *Server) *forwarder {
	f := &forwarder{s: s}
	f.transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     s.cfg.ForwardTLS,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	scheme := "http"
	if s.cfg.ForwardTLS != nil {
		scheme = "https"
	}
	f.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			addr, _ := pr.In.Context().Value(leaderKey{}).(string)
			target := &url.URL{Scheme: scheme, Host: addr}
			if strings.Contains(addr, "://") {
				if u, err := url.Parse(addr); err == nil {
					target = u
				}
			}
			pr.SetURL(target)
			pr.Out.Header.Set(api.HeaderForwarded, s.node.ID())
		},
		Transport:    f.transport,
		ErrorHandler: f.proxyError,
	}
	return f
}

// forward relays the request to the leader at addr and streams back its answer, headers
// included (so X-Raftlock-Index is the leader's).
func (f *forwarder) forward(c echo.Context, addr string) error {
	req := c.Request()
	req = req.WithContext(context.WithValue(req.Context(), leaderKey{}, addr))
	f.proxy.ServeHTTP(c.Response(), req)
	return nil
}

// proxyError answers a failed forward: a request that never reached the leader was not applied
// (no_leader); one that may have reached it has an unknown outcome (timeout).
func (f *forwarder) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var e *apiError
	var op *net.OpError
	switch {
	case errors.As(err, &op) && op.Op == "dial":
		e = noLeader("the leader could not be reached; nothing was applied")
	case tlsRefused(err):
		e = noLeader("the TLS handshake with the leader failed (check both nodes' certificates and CA); nothing was applied")
	case r.Context().Err() != nil:
		return // the client went away
	default:
		e = fromClusterError(errUnknownForward)
	}
	f.s.log.Debug("forwarding failed", "path", r.URL.Path, "error", err)
	if e.retryAfter != "" {
		w.Header().Set("Retry-After", e.retryAfter)
	}
	writeJSON(w, e.status, e.body)
}

// tlsRefused reports a failed TLS handshake with the leader, on either side. The leader's TLS
// layer sends an alert only when the handshake fails, never after it passed the request on, so
// a request that met one was not applied.
func tlsRefused(err error) bool {
	var op *net.OpError
	var rec tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	return errors.Is(err, tlsutil.ErrUntrusted) || errors.Is(err, tlsutil.ErrNoCertificate) ||
		errors.As(err, &op) && op.Op == "remote error" || errors.As(err, &rec) || errors.As(err, &verify)
}

func (f *forwarder) close() { f.transport.CloseIdleConnections() }
