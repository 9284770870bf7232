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
// rather than httputil.ReverseProxy: requests here are small and read in full first (by
// readBody, within the body limits), so each goes out in one write, headers and body together,
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

// hopHeaders are the headers of one connection (RFC 9110, section 7.6.1), not passed on; nor
// is Expect, since the body goes out with the headers.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect"}

// forward relays the request to the leader with id and HTTP address addr and copies back its
// answer, headers included (so X-Raftlock-Index is the leader's). Its body is read in full
// first, within the body limits; under ACL, not before the leader has said that it knows the
// token, if this node does not (see knownAtLeader).
func (f *forwarder) forward(c echo.Context, id, addr string) error {
	in := c.Request()
	target := f.scheme + "://" + addr
	if strings.Contains(addr, "://") {
		target = strings.TrimSuffix(addr, "/")
	}
	if channelRoute(in) && !unlimitedBody(c) && !f.needsTokenCheck(c) && f.s.node.ChannelEnabled() {
		if done, err := f.viaChannel(c); done {
			return err
		}
	}
	if f.needsTokenCheck(c) {
		if known, err := f.knownAtLeader(c, id, target); err != nil || !known {
			return err
		}
	}
	var body io.Reader = http.NoBody
	streamed := hasBody(in) && unlimitedBody(c)
	switch {
	case streamed: // a backup streams on, within its own limit (limitBody)
		b, err := f.s.forwardedBackup(c)
		if err != nil {
			return err
		}
		body = b
	case hasBody(in):
		data, err := f.s.readBody(c)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	out, err := http.NewRequestWithContext(in.Context(), in.Method, target+in.URL.RequestURI(), body)
	if err != nil {
		return fmt.Errorf("forwarding to the leader at %q: %w", addr, err)
	}
	if streamed {
		out.ContentLength = in.ContentLength
	}
	out.Header = in.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Header.Set(api.HeaderForwarded, f.s.node.ID())
	f.s.metrics.forwarded.Inc()
	f.s.metrics.forwardedVia.WithLabelValues(viaHTTP).Inc()
	res, err := f.transport.RoundTrip(out)
	if err != nil {
		if restoreTooSlow(c) {
			// The client's body stopped, and so did the stream to the leader: the leader
			// cannot have restored a body cut short.
			return f.s.errRestoreTooSlow()
		}
		f.proxyError(c.Response(), in, err)
		return nil
	}
	defer res.Body.Close()
	if e := notLeaderRefusal(res.StatusCode, res.Header, id); e != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) // keep the connection
		f.s.dropBody(c)
		return e
	}
	f.answer(c, res.StatusCode, res.Header)
	buf := f.bufs.Get().(*[]byte)
	defer f.bufs.Put(buf)
	var err2 error
	if strings.HasPrefix(res.Header.Get(echo.HeaderContentType), "text/event-stream") {
		err2 = copyFlushing(c.Response(), res.Body, *buf) // a stream: each event as it comes
	} else {
		_, err2 = io.CopyBuffer(c.Response(), res.Body, *buf)
	}
	if err := err2; err != nil {
		// The status line is out: the answer stays short of its Content-Length, so the
		// server closes the connection and the client sees a broken response.
		f.s.log.Debug("forwarding: the leader's answer broke off", "path", clip(in.URL.Path, maxLoggedPath), "error", err)
	}
	return nil
}

// needsTokenCheck says whether, under ACL, the leader must be asked whether it knows the
// request's token before this node reads its body (see knownAtLeader).
func (f *forwarder) needsTokenCheck(c echo.Context) bool {
	in := c.Request()
	_, read := in.Body.(*bufferedBody)
	return f.s.cfg.ACL && !read && hasBody(in) && accessorOf(c) == "" && requestSecret(in) != ""
}

// knownAtLeader asks the leader whether it knows the token of a request that this follower
// does not know (created a moment ago, or never), before the follower reads the request's
// body: with GET /v1/acl/token/self?consistency=stale, marked as forwarded. An unknown token is
// refused there and then (401), its body unread and its connection closed, as the leader
// would refuse it. The answer is believed only from a node that still names itself leader;
// any other answer lets the request go on to the leader, which judges it again.
func (f *forwarder) knownAtLeader(c echo.Context, id, target string) (bool, error) {
	in := c.Request()
	out, err := http.NewRequestWithContext(in.Context(), http.MethodGet, target+"/v1/acl/token/self?consistency=stale", http.NoBody)
	if err != nil {
		return false, fmt.Errorf("asking the leader about a token: %w", err)
	}
	for _, k := range []string{api.HeaderToken, "Authorization"} {
		if v, ok := in.Header[k]; ok {
			out.Header[k] = v
		}
	}
	out.Header.Set(api.HeaderForwarded, f.s.node.ID())
	res, err := f.transport.RoundTrip(out)
	if err != nil {
		f.proxyError(c.Response(), in, err)
		return false, nil
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10)) // keep the connection
	if res.StatusCode == http.StatusUnauthorized && res.Header.Get(api.HeaderLeader) == id {
		f.s.dropBody(c)
		return false, errUnknownToken()
	}
	return true, nil
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
	f.s.log.Debug("forwarding failed", "path", clip(r.URL.Path, maxLoggedPath), "error", err)
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
