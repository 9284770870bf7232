package cluster

import (
	"bufio"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// portMux shares the Raft listener between Raft and the node's HTTP API (Config.APIOnRaftPort),
// so that a node needs one port, and the members reach each other's API (forwarding to the
// leader, joining, the feature checks) at their Raft address. It tells the two apart by the
// first byte a connection sends: raft's NetworkTransport opens every connection with an RPC
// type, a byte below 0x20, and HTTP/1.1 with a method, in capital letters. With TLS the
// listener it reads is the handshaking one, so both kinds are mutually authenticated with a
// node certificate before a byte is read: the API on this port is for the members only. A
// third kind, the peer channel (peerchan.go), opens with channelMarker; a node that does not
// serve it hands such a connection to Raft, which closes it.
type portMux struct {
	inner     net.Listener
	raft, api *muxListener
	chans     *muxListener // the peer channel's connections; nil when the node does not serve it
	wg        sync.WaitGroup

	mu      sync.Mutex
	peeking map[net.Conn]struct{} // connections whose first byte is awaited
	closed  bool

	// apiClosed closes HTTP connections at once instead of handing them out: while the node
	// starts and nobody serves the API yet (see checkNewMember), a member asking it gets an
	// answer at once rather than at its timeout.
	apiClosed atomic.Bool
}

// peekTimeout bounds the wait for a new connection's first byte; peers write at once.
const peekTimeout = 10 * time.Second

func newPortMux(inner net.Listener, channel bool) *portMux {
	m := &portMux{inner: inner, peeking: make(map[net.Conn]struct{})}
	m.raft = &muxListener{m: m, conns: make(chan net.Conn), done: make(chan struct{}), closesAll: true}
	m.api = &muxListener{m: m, conns: make(chan net.Conn), done: make(chan struct{})}
	if channel {
		m.chans = &muxListener{m: m, conns: make(chan net.Conn), done: make(chan struct{})}
	}
	m.wg.Add(1)
	go m.run()
	return m
}

// run accepts connections and routes each on its own goroutine, so that a silent one holds
// up nobody.
func (m *portMux) run() {
	defer m.wg.Done()
	for {
		c, err := m.inner.Accept()
		if err != nil {
			m.raft.shut()
			m.api.shut()
			if m.chans != nil {
				m.chans.shut()
			}
			return
		}
		m.wg.Add(1)
		go m.route(c)
	}
}

// route reads a connection's first byte and hands it to the listener of its kind.
func (m *portMux) route(c net.Conn) {
	defer m.wg.Done()
	if !m.track(c, true) {
		c.Close()
		return
	}
	r := bufio.NewReaderSize(c, 4096)
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	first, err := r.Peek(1)
	if !m.track(c, false) || err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var pc net.Conn = &peekedConn{Conn: c, r: r}
	if tc, ok := c.(*tls.Conn); ok {
		pc = &peekedTLSConn{peekedConn{Conn: c, r: r}, tc}
	}
	to := m.raft
	if first[0] == channelMarker && m.chans != nil {
		to = m.chans
	} else if first[0] >= 'A' && first[0] <= 'Z' {
		if m.apiClosed.Load() {
			c.Close()
			return
		}
		to = m.api
	}
	select {
	case to.conns <- pc:
	case <-to.done:
		c.Close()
	}
}

// track adds c to the connections being peeked at, or removes it; false once the port closed.
func (m *portMux) track(c net.Conn, add bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if add && !m.closed {
		m.peeking[c] = struct{}{}
	} else {
		delete(m.peeking, c)
	}
	return !m.closed
}

// close closes the port and ends the waits for first bytes, then waits for the routing to end.
func (m *portMux) close() error {
	err := m.inner.Close()
	m.mu.Lock()
	m.closed = true
	for c := range m.peeking {
		_ = c.SetReadDeadline(time.Now())
	}
	m.mu.Unlock()
	m.api.shut()
	if m.chans != nil {
		m.chans.shut()
	}
	m.wg.Wait()
	return err
}

// muxListener hands out the connections of one kind.
type muxListener struct {
	m     *portMux
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	// closesAll makes Close close the port too: Raft's listener is the port's, and the
	// transport closes it when the node closes.
	closesAll bool
}

// Accept returns the next connection of this listener's kind.
func (l *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops handing out connections; Raft's closes the port and waits for the routing to end.
func (l *muxListener) Close() error {
	l.shut()
	if !l.closesAll {
		return nil
	}
	return l.m.close()
}

// shut stops handing out connections.
func (l *muxListener) shut() { l.once.Do(func() { close(l.done) }) }

// Addr returns the port's address.
func (l *muxListener) Addr() net.Addr { return l.m.inner.Addr() }

// peekedConn is a connection whose first bytes were read ahead into r.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

// Read reads what was read ahead first.
func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// peekedTLSConn is a peekedConn over TLS. net/http sets a request's TLS state only for a
// *tls.Conn; ConnectionState lets the API find it on this wrapper (see httpapi.Server.ServePeers).
type peekedTLSConn struct {
	peekedConn
	tls *tls.Conn
}

// ConnectionState returns the TLS state of the connection.
func (c *peekedTLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// APIListener returns the listener of the HTTP connections made to the Raft port, with
// Config.APIOnRaftPort; nil without it. Serve the node's API on it.
func (n *Node) APIListener() net.Listener {
	if n.mux == nil {
		return nil
	}
	return n.mux.api
}
