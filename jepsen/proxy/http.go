package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// maxRequestBody bounds the body the HTTP proxy keeps of one request: a client's requests are
// small JSON documents, and a request held back or copied must be kept whole.
const maxRequestBody = 1 << 20

// lateTimeout bounds the delivery of a request that arrives late on its own (its answer goes
// nowhere): long enough for the longest wait a client asks for in a run.
const lateTimeout = time.Minute

// HTTPProxy forwards the HTTP requests it accepts on a loopback port to one target and sees each
// request whole, so that a RequestFault can hold a request back or deliver it again later. It
// terminates TLS when given a server configuration (the client must trust its certificate) and
// speaks HTTPS to the target when given a client configuration; HTTP/2 is served over TLS as the
// target does. Its modes are a Proxy's: Pass forwards, Blackhole accepts connections and
// swallows what they send, Refuse closes them. Every change of mode closes every open connection,
// toward the client and toward the target, and loses the requests held back or waiting to be
// delivered again, as a cut network loses what is in flight.
type HTTPProxy struct {
	gate
	scheme  string // the target's: http or https
	srv     *http.Server
	handoff chan net.Conn   // accepted connections handed to srv
	fwd     *http.Transport // forwards requests, on pooled connections
	late    *http.Transport // delivers requests whose client is gone, each on a new connection
	ctx     context.Context // ends at Close: ends late deliveries
	cancel  context.CancelFunc

	fault *RequestFault // guarded by mu
}

// ListenHTTP starts an HTTP proxy on a free port of 127.0.0.1 forwarding to target (host:port).
// serverTLS, if set, makes it serve HTTPS with that configuration's certificate; targetTLS, if
// set, makes it speak HTTPS to the target.
func ListenHTTP(target string, serverTLS, targetTLS *tls.Config) (*HTTPProxy, error) {
	p := &HTTPProxy{scheme: "http", handoff: make(chan net.Conn)}
	if err := p.listen(target); err != nil {
		return nil, err
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if targetTLS != nil {
		p.scheme = "https"
	}
	p.fwd = p.transport(targetTLS, false)
	p.late = p.transport(targetTLS, true)
	p.srv = &http.Server{Handler: p, ErrorLog: log.New(io.Discard, "", 0), TLSConfig: serverTLS.Clone()}
	cl := &chanListener{p: p}
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		if serverTLS != nil {
			p.srv.ServeTLS(cl, "", "") // certificates come from TLSConfig; ends at Close
		} else {
			p.srv.Serve(cl) // ends at Close
		}
	}()
	go p.serve()
	return p, nil
}

// transport returns a transport toward the target whose connections are tracked, so that a
// change of mode closes them; oneShot gives every request a new connection.
func (p *HTTPProxy) transport(targetTLS *tls.Config, oneShot bool) *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			t, ok := p.trackPass(c)
			if !ok {
				return nil, errors.New("proxy: cut while dialing")
			}
			return t, nil
		},
		TLSClientConfig:     targetTLS.Clone(),
		ForceAttemptHTTP2:   targetTLS != nil && !oneShot,
		DisableKeepAlives:   oneShot,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
}

// SetMode changes what the proxy does; any change closes every open connection and loses the
// requests held back or due to be delivered again.
func (p *HTTPProxy) SetMode(m Mode) {
	if p.setMode(m) {
		p.fwd.CloseIdleConnections()
	}
}

// SetFault installs the fault that decides what happens to each request from now on; nil
// removes it. Requests already held back or copied keep their fate.
func (p *HTTPProxy) SetFault(f *RequestFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault = f
}

// Close stops the proxy, closes its connections and drops what it held back.
func (p *HTTPProxy) Close() error {
	err := p.shut()
	p.cancel()
	p.srv.Close()
	p.wg.Wait()
	p.fwd.CloseIdleConnections()
	return err
}

// state returns the mode, its generation and the fault in force.
func (p *HTTPProxy) state() (Mode, uint64, *RequestFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.gen, p.fault
}

// trackPass registers a connection, wrapped so that closing it unregisters it; false means the
// proxy is not passing traffic or is closed.
func (p *HTTPProxy) trackPass(c net.Conn) (net.Conn, bool) {
	t := &trackedConn{Conn: c, g: &p.gate}
	if !p.track(Pass, t) {
		c.Close()
		return nil, false
	}
	return t, true
}

// serve accepts connections: in Pass mode they go to the HTTP server, in Blackhole mode their
// bytes are swallowed, in Refuse mode they are closed.
func (p *HTTPProxy) serve() {
	defer p.wg.Done()
	for {
		c, ok := p.accept()
		if !ok {
			return
		}
		switch p.Mode() {
		case Refuse:
			c.Close()
		case Blackhole:
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.swallow(c)
			}()
		default:
			t, ok := p.trackPass(c)
			if !ok {
				continue
			}
			select {
			case p.handoff <- t:
			case <-p.ctx.Done():
				t.Close()
				return
			}
		}
	}
}

// trackedConn unregisters itself from its proxy when closed.
type trackedConn struct {
	net.Conn
	g    *gate
	once sync.Once
}

// Close closes the connection and forgets it.
func (t *trackedConn) Close() error {
	t.once.Do(func() { t.g.forget(t) })
	return t.Conn.Close()
}

// chanListener hands the connections the proxy accepted to its HTTP server.
type chanListener struct{ p *HTTPProxy }

// Accept returns the next connection the proxy let through.
func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.p.handoff:
		return c, nil
	case <-l.p.ctx.Done():
		return nil, net.ErrClosed
	}
}

// Close does nothing: the proxy's own listener is what closes.
func (l *chanListener) Close() error { return nil }

// Addr is the proxy's address.
func (l *chanListener) Addr() net.Addr { return l.p.ln.Addr() }

// hopHeaders are the headers of one connection, not of the request; they are not forwarded.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// request is what the proxy keeps of a request to forward it now or later.
type request struct {
	method string
	uri    string // path and query
	header http.Header
	body   []byte
}

// outbound builds the request to the target.
func (p *HTTPProxy) outbound(ctx context.Context, r request) (*http.Request, error) {
	out, err := http.NewRequestWithContext(ctx, r.method, p.scheme+"://"+p.target+r.uri, bytes.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	out.Header = r.header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	return out, nil
}

// ServeHTTP forwards one request, after the fault in force (if any) decided its fate: held back
// for a while, and/or delivered now with its answer lost and again later on a new connection.
// A failure toward the target cuts the client's connection, as the TCP proxy's would.
func (p *HTTPProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil || len(body) > maxRequestBody {
		panic(http.ErrAbortHandler)
	}
	req := request{method: r.Method, uri: r.URL.RequestURI(), header: r.Header, body: body}
	_, gen, f := p.state()
	var hold, again time.Duration
	if f != nil {
		hold, again = f.decide(r)
	}
	if again > 0 {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if p.wait(again) {
				p.deliverLate(gen, req, f)
			}
		}()
	}
	if hold > 0 {
		if !p.wait(hold) {
			panic(http.ErrAbortHandler)
		}
		if r.Context().Err() != nil {
			// The client gave up meanwhile: the request still arrives, late, on its own.
			p.deliverLate(gen, req, f)
			return
		}
		if _, now, _ := p.state(); now != gen {
			panic(http.ErrAbortHandler) // lost with a cut
		}
	}
	out, err := p.outbound(r.Context(), req)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	resp, err := p.fwd.RoundTrip(out)
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	defer resp.Body.Close()
	if again > 0 {
		// The request took effect, its answer is lost: the client must treat it as unknown.
		io.Copy(io.Discard, resp.Body)
		panic(http.ErrAbortHandler)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// wait sleeps d; false means the proxy closed meanwhile.
func (p *HTTPProxy) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// deliverLate sends a request whose client is gone on a new connection and drops its answer,
// unless the mode changed since the request arrived: a cut loses what was in flight.
func (p *HTTPProxy) deliverLate(gen uint64, r request, f *RequestFault) {
	mode, now, _ := p.state()
	if mode != Pass || now != gen {
		f.lost.Add(1)
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, lateTimeout)
	defer cancel()
	out, err := p.outbound(ctx, r)
	if err != nil {
		f.lost.Add(1)
		return
	}
	resp, err := p.late.RoundTrip(out)
	if err != nil {
		f.lost.Add(1)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	f.late.Add(1)
}
