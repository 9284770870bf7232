package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// gate is what the TCP and the HTTP proxy share: the listener, the target, the mode, and the
// open connections that every change of mode closes, as a cut network loses what is in flight.
type gate struct {
	ln     net.Listener
	target string // host:port

	mu     sync.Mutex
	mode   Mode
	gen    uint64                // bumped by every mode change: a late request of an older one is lost
	conns  map[net.Conn]struct{} // every open connection, accepted and dialed
	closed bool
	wg     sync.WaitGroup
}

// listen opens the gate on a free port of 127.0.0.1.
func (g *gate) listen(target string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("proxy: listen: %w", err)
	}
	g.ln, g.target, g.conns = ln, target, map[net.Conn]struct{}{}
	return nil
}

// Addr is the address to dial instead of the target.
func (g *gate) Addr() string { return g.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (g *gate) Target() string { return g.target }

// Mode is the proxy's current mode.
func (g *gate) Mode() Mode {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mode
}

// setMode changes the mode and closes every open connection; false means m was the mode already.
func (g *gate) setMode(m Mode) bool {
	g.mu.Lock()
	if g.mode == m {
		g.mu.Unlock()
		return false
	}
	g.mode = m
	g.gen++
	conns := g.conns
	g.conns = map[net.Conn]struct{}{}
	g.mu.Unlock()
	for c := range conns {
		c.Close()
	}
	return true
}

// shut marks the gate closed, so that no connection is tracked any more, closes its listener
// and every open connection, and returns the listener's error.
func (g *gate) shut() error {
	g.mu.Lock()
	g.closed = true
	conns := g.conns
	g.conns = map[net.Conn]struct{}{}
	g.mu.Unlock()
	err := g.ln.Close()
	for c := range conns {
		c.Close()
	}
	return err
}

// accept returns the listener's next connection, riding out transient errors; false means the
// listener is closed.
func (g *gate) accept() (net.Conn, bool) {
	for {
		c, err := g.ln.Accept()
		if err == nil {
			return c, true
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, false
		}
		time.Sleep(10 * time.Millisecond) // transient accept error, e.g. out of descriptors
	}
}

// track registers connections; false means the gate is closed or its mode is not mode.
func (g *gate) track(mode Mode, cs ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.mode != mode {
		return false
	}
	for _, c := range cs {
		g.conns[c] = struct{}{}
	}
	return true
}

// forget unregisters a connection without closing it.
func (g *gate) forget(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, c)
}

// untrack unregisters connections and closes them.
func (g *gate) untrack(cs ...net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range cs {
		delete(g.conns, c)
		c.Close()
	}
}

// swallow reads and drops what c sends until the peer gives up or the mode changes, then closes
// it: a black hole.
func (g *gate) swallow(c net.Conn) {
	if !g.track(Blackhole, c) {
		c.Close()
		return
	}
	io.Copy(io.Discard, c)
	g.untrack(c)
}
