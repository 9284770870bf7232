package tlsutil

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// DefaultHandshakeTimeout bounds a server-side handshake in Listener.
const DefaultHandshakeTimeout = 10 * time.Second

// ListenerOptions tune a Listener.
type ListenerOptions struct {
	// HandshakeTimeout bounds each handshake; default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// OnRefused, if set, is called (from the Listener's goroutines) for every connection whose
	// handshake failed, before it is closed; not for handshakes that Close ended. It is also
	// called, with ErrTooManyHandshakes, for a connection closed at once by the bounds below.
	OnRefused func(remote net.Addr, err error)
	// MaxHandshakes bounds the handshakes in progress at once, and MaxHandshakesPerHost those
	// from one IP address; a connection over either is closed at once, before its handshake.
	// Zero means no bound. Connections whose handshake is done do not count.
	MaxHandshakes, MaxHandshakesPerHost int
}

// ErrTooManyHandshakes is why a Listener closed a connection over its handshake bounds.
var ErrTooManyHandshakes = errors.New("tlsutil: too many TLS handshakes in progress")

// Listener accepts TLS connections whose handshake has already succeeded. Each handshake runs
// in its own goroutine, so that a slow or silent peer delays nobody else; a connection whose
// handshake fails is closed unanswered and never returned by Accept. A plain-HTTP request thus
// gets no response at all, and a Raft peer without a trusted certificate is dropped before
// the Raft transport reads a byte from it.
type Listener struct {
	inner net.Listener
	cfg   *tls.Config
	opts  ListenerOptions

	conns chan *tls.Conn
	errs  chan error

	pendingMu sync.Mutex
	pending   int            // handshakes in progress
	perHost   map[string]int // handshakes in progress by remote IP
	done      chan struct{}
	ctx       context.Context
	stop      context.CancelFunc
	once      sync.Once
	wg        sync.WaitGroup
}

// NewListener wraps ln; cfg is a server configuration (see Store). Close closes ln.
func NewListener(ln net.Listener, cfg *tls.Config, opts ListenerOptions) *Listener {
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	l := &Listener{
		inner:   ln,
		cfg:     cfg,
		opts:    opts,
		conns:   make(chan *tls.Conn),
		errs:    make(chan error),
		done:    make(chan struct{}),
		perHost: make(map[string]int),
	}
	l.ctx, l.stop = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case l.errs <- err:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		host, ok := l.admit(c)
		if !ok {
			if l.opts.OnRefused != nil {
				l.opts.OnRefused(c.RemoteAddr(), ErrTooManyHandshakes)
			}
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.handshake(c, host)
	}
}

// admit counts a new connection's handshake, unless that would exceed the bounds.
func (l *Listener) admit(c net.Conn) (host string, ok bool) {
	host = c.RemoteAddr().String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	l.pendingMu.Lock()
	defer l.pendingMu.Unlock()
	if max := l.opts.MaxHandshakes; max > 0 && l.pending >= max {
		return host, false
	}
	if max := l.opts.MaxHandshakesPerHost; max > 0 && l.perHost[host] >= max {
		return host, false
	}
	l.pending++
	l.perHost[host]++
	return host, true
}

// release uncounts a handshake that ended.
func (l *Listener) release(host string) {
	l.pendingMu.Lock()
	defer l.pendingMu.Unlock()
	l.pending--
	if l.perHost[host]--; l.perHost[host] <= 0 {
		delete(l.perHost, host)
	}
}

func (l *Listener) handshake(raw net.Conn, host string) {
	defer l.wg.Done()
	// Close (through l.ctx) ends a handshake that is still running.
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.HandshakeTimeout)
	defer cancel()
	tc := tls.Server(raw, l.cfg)
	err := tc.HandshakeContext(ctx)
	l.release(host)
	if err != nil {
		// A handshake that Close cut short refused nobody.
		if l.opts.OnRefused != nil && l.ctx.Err() == nil {
			l.opts.OnRefused(raw.RemoteAddr(), err)
		}
		raw.Close()
		return
	}
	select {
	case l.conns <- tc:
	case <-l.done:
		tc.Close()
	}
}

// Accept returns the next connection whose handshake succeeded.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, ends the handshakes in progress and closes the inner listener.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.stop()
		err = l.inner.Close()
	})
	l.wg.Wait()
	return err
}

// Addr returns the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }
