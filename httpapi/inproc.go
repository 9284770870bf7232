package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/raftlock/raftlock/api"
)

// ErrInProcessClosed refuses a request sent through Server.Transport once the server began to
// shut down; it arrives inside a *net.OpError whose Op is "dial", so that a client knows the
// request never reached the node.
var ErrInProcessClosed = errors.New("httpapi: the in-process API is closed")

// errInProcessCut ends a request in flight through Server.Transport when the server closes.
var errInProcessCut = errors.New("httpapi: the in-process API closed while the request was in flight")

// inProcessAddr is the RemoteAddr of the requests that come through Server.Transport: the rate
// limiter and the audit log see them as one client, this process.
const inProcessAddr = "in-process"

// Transport returns an http.RoundTripper that hands each request to this server's handler in
// memory, without a connection: what the Go client of the process that runs the node uses
// (client.WithTransport). The handler sees the request as from a client: with its token, the
// leader routing of the node behind it (a follower forwards it to the leader over the network),
// and its context, so that a caller who gives up ends a long poll at once, as a closed
// connection would. An answer is handed back whole when the handler returns, or streamed from
// its first Flush on. Once Shutdown or Close begins, new requests are refused as a refused
// connection would be (nothing reached the node); Close, or the end of Shutdown's context,
// cuts off those still in flight.
func (s *Server) Transport() http.RoundTripper { return s.inproc }

// inProcess is the server's in-memory RoundTripper (see Server.Transport).
type inProcess struct {
	s *Server

	mu      sync.Mutex
	closed  bool           // Shutdown or Close began: new requests are refused
	running sync.WaitGroup // handlers in flight
	cut     chan struct{}  // closed to cut off the requests in flight
	cutOnce sync.Once
}

func newInProcess(s *Server) *inProcess { return &inProcess{s: s, cut: make(chan struct{})} }

// RoundTrip runs the handler on req and returns its answer.
func (t *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.begin() {
		closeBody(req)
		return nil, &net.OpError{Op: "dial", Net: inProcessAddr, Err: ErrInProcessClosed}
	}
	ctx, cancel := context.WithCancel(req.Context())
	w := &memWriter{header: make(http.Header), ready: make(chan struct{}), cancel: cancel}
	go func() {
		defer t.running.Done()
		defer closeBody(req)
		t.s.echo.ServeHTTP(w, serverRequest(ctx, req))
		w.finish()
	}()
	select {
	case <-w.ready:
		return w.response(req), nil
	case <-req.Context().Done():
		cancel()
		return nil, context.Cause(req.Context())
	case <-t.cut:
		cancel()
		w.abort(errInProcessCut)
		return nil, errInProcessCut
	}
}

// begin counts a new request in, unless the transport is closed.
func (t *inProcess) begin() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.running.Add(1)
	return true
}

// shutdown refuses new requests and waits for those in flight until ctx ends, then cuts off
// the rest.
func (t *inProcess) shutdown(ctx context.Context) error {
	t.refuse()
	done := make(chan struct{})
	go func() { t.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		t.cutOff()
		return ctx.Err()
	}
}

// close refuses new requests and cuts off those in flight.
func (t *inProcess) close() {
	t.refuse()
	t.cutOff()
}

func (t *inProcess) refuse() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

func (t *inProcess) cutOff() { t.cutOnce.Do(func() { close(t.cut) }) }

// serverRequest makes of a client's request the request a server would have read: the path
// and query as sent, a body (empty if none), this process as the remote address, and no
// forwarding mark, since no other node sent it.
func serverRequest(ctx context.Context, req *http.Request) *http.Request {
	r := req.Clone(ctx)
	r.RequestURI = req.URL.RequestURI()
	r.RemoteAddr = inProcessAddr
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	if r.Host == "" {
		r.Host = req.URL.Host
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	r.Header.Del(api.HeaderForwarded)
	return r
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// memWriter is the http.ResponseWriter of an in-process request. The answer is buffered until
// the handler returns, which is when most answers are ready, even a long poll's; a Flush turns
// it into a stream through a pipe, which the caller reads as the handler writes.
type memWriter struct {
	header http.Header
	cancel context.CancelFunc

	mu          sync.Mutex
	status      int
	wroteHeader bool
	final       http.Header // the header as it was when the status was written
	buf         bytes.Buffer
	stream      *io.PipeWriter // from the first Flush on
	body        io.ReadCloser  // what the caller reads
	ready       chan struct{}  // closed when the answer can be handed back
	readyOnce   sync.Once
}

// Header returns the header to be sent.
func (w *memWriter) Header() http.Header { return w.header }

// WriteHeader sets the status; informational ones (1xx) are dropped, as a client would skip them.
func (w *memWriter) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(code)
}

func (w *memWriter) writeHeaderLocked(code int) {
	if w.wroteHeader || code < 200 {
		return
	}
	w.status, w.wroteHeader, w.final = code, true, w.header.Clone()
}

// Write writes to the buffer, or to the stream after a Flush.
func (w *memWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.writeHeaderLocked(http.StatusOK)
	stream := w.stream
	if stream == nil {
		defer w.mu.Unlock()
		return w.buf.Write(p)
	}
	w.mu.Unlock()
	return stream.Write(p) // blocks until the caller reads it, or closes the body
}

// Flush hands the answer back at once and streams what follows.
func (w *memWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(http.StatusOK)
	if w.stream != nil {
		return
	}
	pr, pw := io.Pipe()
	w.stream = pw
	w.body = &memBody{Reader: io.MultiReader(bytes.NewReader(w.buf.Bytes()), pr), pipe: pr, cancel: w.cancel}
	w.readyOnce.Do(func() { close(w.ready) })
}

// finish ends the answer when the handler returns.
func (w *memWriter) finish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writeHeaderLocked(http.StatusOK)
	if w.stream != nil {
		w.stream.Close()
		return
	}
	w.body = &memBody{Reader: bytes.NewReader(w.buf.Bytes()), cancel: w.cancel}
	w.readyOnce.Do(func() { close(w.ready) })
}

// abort ends a stream with err, for a caller that no longer reads it.
func (w *memWriter) abort(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stream != nil {
		w.stream.CloseWithError(err)
	}
}

// response returns the answer; call it once ready is closed.
func (w *memWriter) response(req *http.Request) *http.Response {
	w.mu.Lock()
	defer w.mu.Unlock()
	res := &http.Response{
		Status:        strconv.Itoa(w.status) + " " + http.StatusText(w.status),
		StatusCode:    w.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.final,
		Body:          w.body,
		ContentLength: -1,
		Request:       req,
	}
	if w.stream == nil {
		res.ContentLength = int64(w.buf.Len())
	}
	return res
}

// memBody is the body of an in-process answer; closing it ends the handler's context, as a
// client that closes its connection does.
type memBody struct {
	io.Reader
	pipe   *io.PipeReader // nil when the answer was whole
	cancel context.CancelFunc
}

// Close stops reading: the handler's context ends and its writes fail.
func (b *memBody) Close() error {
	b.cancel()
	if b.pipe != nil {
		b.pipe.Close()
	}
	return nil
}
