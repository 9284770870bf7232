package httpapi

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// Forwarding over the peer channel. A follower that passes a write to the leader sends it over
// the node's peer channel (cluster.ChannelHTTP) when the cluster enabled it, instead of as a
// second HTTP request: the request as this node read it (method, path and query, headers, the
// body it has read in full), its deadline travelling with the frame and the caller's giving up
// travelling as a cancel. The leader hands it to the same handler chain as an HTTP request
// forwarded on the Raft port, with the channel connection's TLS state, so every judgement is
// the leader's own, made the same way: the token (under --acl), the forwarding mark (only a
// node certificate may carry it), the attempt (in the request's body or headers, as the client
// sent it) and the term a confirmation is pinned to. Its answer (status, headers, body) comes
// back in one frame and is written to the client as the HTTP forward writes the leader's
// answer. Many requests share the one connection and are written out together.
//
// The channel serves requests whose answer is written whole when the handler returns: writes
// to sessions and locks. Reads, blocking queries, streams, restores, and a request whose token
// this node does not know yet (see knownAtLeader) take the HTTP forward, as does every request
// while the channel is unavailable (a cluster with a member of a version before it, a leader
// not reachable on it right now): nothing was sent then, so nothing is lost by sending it again.

// channelRoute says whether a forwarded request goes over the peer channel.
func channelRoute(r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return false
	}
	p := r.URL.Path
	return p == "/v1/sessions" || strings.HasPrefix(p, "/v1/sessions/") || strings.HasPrefix(p, "/v1/locks/")
}

// viaChannel forwards the request to the leader over the peer channel; false, with nothing
// answered, if the channel could not take it (the caller then forwards it over HTTP).
func (f *forwarder) viaChannel(c echo.Context) (bool, error) {
	in := c.Request()
	var body []byte
	if hasBody(in) {
		data, err := f.s.readBody(c)
		if err != nil {
			return true, err
		}
		body = data
	}
	hdr := in.Header.Clone()
	for _, h := range hopHeaders {
		hdr.Del(h)
	}
	hdr.Set(api.HeaderForwarded, f.s.node.ID())
	leader, out, err := f.s.node.CallLeader(in.Context(), cluster.ChannelHTTP, encodeChannelRequest(in.Method, in.URL.RequestURI(), hdr, body))
	if errors.Is(err, cluster.ErrChannelUnavailable) || errors.Is(err, cluster.ErrChannelUnknownKind) {
		if in.Context().Err() != nil {
			return true, nil // the client went away
		}
		f.s.log.Debug("forwarding: the peer channel is not available, forwarding over HTTP", "error", err)
		return false, nil
	}
	if err != nil {
		if in.Context().Err() == nil {
			f.s.metrics.forwardedVia.WithLabelValues(viaChannel).Inc()
		}
		// The request was sent and the connection was lost before its answer: its outcome is
		// unknown, as for a broken HTTP forward.
		f.proxyError(c.Response(), in, err)
		return true, nil
	}
	if len(out) == 0 {
		// The leader's server closed while the request was in flight.
		f.proxyError(c.Response(), in, errUnknownForward)
		return true, nil
	}
	status, rh, rbody, err := decodeChannelAnswer(out)
	if err != nil {
		f.s.log.Warn("forwarding: the leader's answer over the peer channel is malformed", "error", err)
		f.proxyError(c.Response(), in, errUnknownForward)
		return true, nil
	}
	f.s.metrics.forwarded.Inc()
	f.s.metrics.forwardedVia.WithLabelValues(viaChannel).Inc()
	if e := notLeaderRefusal(status, rh, leader); e != nil {
		return true, e
	}
	f.answer(c, status, rh)
	if _, err := c.Response().Write(rbody); err != nil {
		f.s.log.Debug("forwarding: writing the leader's answer failed", "path", clip(in.URL.Path, maxLoggedPath), "error", err)
	}
	return true, nil
}

// answer writes the status and headers of the leader's answer, as the leader gave them, but
// for the headers of one connection and the accessor id the leader passed back for this
// node's audit entry.
func (f *forwarder) answer(c echo.Context, status int, from http.Header) {
	if a := from.Get(headerAccessor); a != "" {
		c.Set(accessorKey, a) // the leader's word, on this node's own connection to it
	}
	h := c.Response().Header()
	for k, v := range from {
		h[k] = v
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	h.Del(headerAccessor)
	if status == http.StatusUnauthorized {
		f.s.dropBody(c)
	}
	c.Response().WriteHeader(status)
}

// serveChannel is the leader's side: it runs a request that a follower passed on over the peer
// channel through the API's handlers, as if it had arrived on the Raft port's HTTP side over
// the channel's connection, and returns the encoded answer.
func (s *Server) serveChannel(ctx context.Context, req cluster.ChannelRequest) []byte {
	method, uri, hdr, body, err := decodeChannelRequest(req.Payload)
	if err != nil {
		s.log.Warn("the peer channel carried a malformed request", "remote", req.Remote, "error", err)
		return encodeChannelAnswer(http.StatusBadRequest, http.Header{}, nil)
	}
	ctx = context.WithValue(ctx, connPeerKey{}, &connPeer{tls: req.TLS})
	r, err := http.NewRequestWithContext(ctx, method, uri, http.NoBody)
	if err != nil {
		return encodeChannelAnswer(http.StatusBadRequest, http.Header{}, nil)
	}
	r.RequestURI = uri
	r.Header = hdr
	// As over HTTP, where the follower addresses the leader's HTTP address.
	_, r.Host = s.node.Leader()
	if req.Remote != nil {
		r.RemoteAddr = req.Remote.String()
	}
	if len(body) > 0 {
		r.Body = &bufferedBody{Reader: *bytes.NewReader(body), data: body}
		r.ContentLength = int64(len(body))
	}
	w := &recorder{header: make(http.Header)}
	s.echo.ServeHTTP(w, r)
	select {
	case <-s.inproc.cut:
		// Close (or the end of Shutdown's wait) cuts off the requests in flight, as it closes
		// HTTP connections: the follower answers that the outcome is unknown.
		return nil
	default:
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return encodeChannelAnswer(w.status, w.final, w.buf.Bytes())
}

// recorder is the http.ResponseWriter of a request that came over the peer channel: the answer
// is kept whole and sent back in one frame.
type recorder struct {
	header      http.Header
	final       http.Header
	status      int
	wroteHeader bool
	buf         bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.wroteHeader || code < 200 {
		return
	}
	w.status, w.wroteHeader, w.final = code, true, w.header.Clone()
}

func (w *recorder) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.buf.Write(p)
}

// viaChannel and viaHTTP are the values of raftlock_http_forwarded_via_total's label.
const (
	viaChannel = "channel"
	viaHTTP    = "http"
)

// The encoding of a forwarded request and its answer: strings and byte strings with a uvarint
// length before each, a header as a count of (name, value) pairs.

func encodeChannelRequest(method, uri string, h http.Header, body []byte) []byte {
	b := make([]byte, 0, 64+len(uri)+len(body)+headerSize(h))
	b = appendString(b, method)
	b = appendString(b, uri)
	b = appendHeader(b, h)
	return appendString(b, string(body))
}

func decodeChannelRequest(p []byte) (method, uri string, h http.Header, body []byte, err error) {
	d := decoder{b: p}
	method, uri, h, body = d.str(), d.str(), d.header(), d.bytes()
	return method, uri, h, body, d.done()
}

func encodeChannelAnswer(status int, h http.Header, body []byte) []byte {
	b := make([]byte, 0, 16+len(body)+headerSize(h))
	b = binary.AppendUvarint(b, uint64(status))
	b = appendHeader(b, h)
	return append(binary.AppendUvarint(b, uint64(len(body))), body...)
}

func decodeChannelAnswer(p []byte) (status int, h http.Header, body []byte, err error) {
	d := decoder{b: p}
	status = int(d.uvarint())
	h, body = d.header(), d.bytes()
	if err := d.done(); err != nil {
		return 0, nil, nil, err
	}
	if status < 100 || status > 999 {
		return 0, nil, nil, fmt.Errorf("status %d", status)
	}
	return status, h, body, nil
}

func headerSize(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendHeader(b []byte, h http.Header) []byte {
	n := 0
	for _, vs := range h {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range h {
		for _, v := range vs {
			b = appendString(appendString(b, k), v)
		}
	}
	return b
}

// decoder reads what the encoders above wrote; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

var errShortChannelPayload = errors.New("httpapi: a peer channel payload ended early")

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShortChannelPayload
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errShortChannelPayload
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) header() http.Header {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) { // each pair takes at least two bytes
		d.err = errShortChannelPayload
		return nil
	}
	h := make(http.Header, n)
	for range n {
		k, v := d.str(), d.str()
		if d.err != nil {
			return nil
		}
		h[k] = append(h[k], v)
	}
	return h
}

func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		return errors.New("httpapi: a peer channel payload has bytes after its end")
	}
	return d.err
}
