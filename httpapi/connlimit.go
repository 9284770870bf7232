package httpapi

import (
	"net"
	"sync"
)

// limitListener serves at most n connections at once (Config.MaxConnections). A connection
// accepted while all n places are taken waits, unserved, for one to free, and the rest wait
// in the kernel's accept queue, as with netutil.LimitListener; each connection that had to
// wait is counted (onFull), once, when it is accepted.
type limitListener struct {
	net.Listener
	places    chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	onFull    func()
}

func newLimitListener(ln net.Listener, n int, onFull func()) *limitListener {
	return &limitListener{Listener: ln, places: make(chan struct{}, n), done: make(chan struct{}), onFull: onFull}
}

// Accept returns the next connection once it has a place.
func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.places <- struct{}{}:
	default:
		l.onFull()
		select {
		case l.places <- struct{}{}:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
	return &limitConn{Conn: c, release: func() { <-l.places }}, nil
}

// Close closes the listener and ends a wait for a place.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn is a connection that gives its place back when it closes, once.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
