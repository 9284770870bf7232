package httpapi

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/tlsutil"
)

// forwarder relays requests from a follower to the leader over pooled keep-alive connections,
// over HTTPS with this node's certificate when Config.ForwardTLS is set. It is a plain client
// rather than httputil.ReverseProxy: requests here are small and already read (the handlers
// decode them before they forward), so each goes out in one write, headers and body together,
// and answers are copied through pooled buffers.
type forwarder struct {
	s         *Server
	transport *http.Transport
	scheme    string
	bufs      sync.Pool // *[]byte for copying answers
}

func newForwarder(s *Server) *forwarder {
	f := &forwarder{s: s, scheme: "http"}
	f.transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		TLSClientConfig:     s.cfg.ForwardTLS,
		TLSHandshakeTimeout: 5 * time.Second,
		DisableCompression:  true, // pass answers on as the leader wrote them
	}
	if s.cfg.ForwardTLS != nil {
		f.scheme = "https"
	}
	f.bufs.New = func() any { b := make([]byte, 8<<10); return &b }
	return f
}

// hopHeaders are the headers of one connection (RFC 9110, section 7.6.1), not passed on.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward relays the request to the leader at addr and copies back its answer, headers
// included (so X-Raftlock-Index is the leader's).
func (f *forwarder) forward(c echo.Context, addr string) error {
	in := c.Request()
	target := f.scheme + "://" + addr
	if strings.Contains(addr, "://") {
		target = strings.TrimSuffix(addr, "/")
	}
	var body io.Reader = http.NoBody
	if in.Body != nil && in.Body != http.NoBody && in.ContentLength != 0 {
		data, err := io.ReadAll(in.Body) // in memory already, or bounded by the body limit
		if err != nil {
			return invalid("reading the request body: %v", err)
		}
		body = bytes.NewReader(data)
	}
	out, err := http.NewRequestWithContext(in.Context(), in.Method, target+in.URL.RequestURI(), body)
	if err != nil {
		return fmt.Errorf("forwarding to the leader at %q: %w", addr, err)
	}
	out.Header = in.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Header.Set(api.HeaderForwarded, f.s.node.ID())
	f.s.metrics.forwarded.Inc()
	res, err := f.transport.RoundTrip(out)
	if err != nil {
		f.proxyError(c.Response(), in, err)
		return nil
	}
	defer res.Body.Close()
	h := c.Response().Header()
	for k, v := range res.Header {
		h[k] = v
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	c.Response().WriteHeader(res.StatusCode)
	buf := f.bufs.Get().(*[]byte)
	defer f.bufs.Put(buf)
	if _, err := io.CopyBuffer(c.Response(), res.Body, *buf); err != nil {
		// The status line is out: the answer stays short of its Content-Length, so the
		// server closes the connection and the client sees a broken response.
		f.s.log.Debug("forwarding: the leader's answer broke off", "path", in.URL.Path, "error", err)
	}
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
