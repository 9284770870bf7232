package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's stream layer over a listener the caller may have bound already, so that
// tests and the dev cluster can use port 0 and still know every address before raft starts.
// With TLS, the listener is a tlsutil.Listener (it hands on only connections whose handshake,
// client certificate included, succeeded) and dialTLS secures the connections this node opens.
// Close also closes the connections it accepted: raft's transport does not, and the goroutine
// serving each one would stay blocked reading it, holding the transport and through it the
// node's raft and state, for as long as the peer keeps its end open.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dialTLS   *tls.Config

	mu       sync.Mutex
	accepted map[*trackedConn]struct{}
	closed   bool
}

var _ raft.StreamLayer = (*streamLayer)(nil)

// Accept waits for the next connection and tracks it until it or the layer closes.
func (s *streamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	if s.accepted == nil {
		s.accepted = make(map[*trackedConn]struct{})
	}
	tc := &trackedConn{Conn: c, s: s}
	s.accepted[tc] = struct{}{}
	return tc, nil
}

// Close stops accepting and closes every accepted connection still open.
func (s *streamLayer) Close() error {
	err := s.Listener.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.accepted {
		c.Conn.Close()
	}
	s.accepted = nil
	return err
}

// trackedConn is an accepted connection that leaves its layer's set when it closes.
type trackedConn struct {
	net.Conn
	s *streamLayer
}

// Close closes the connection and forgets it.
func (c *trackedConn) Close() error {
	c.s.mu.Lock()
	delete(c.s.accepted, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// Dial opens a connection to a peer; with TLS, the handshake is done (within timeout) before it
// returns, so that raft never writes to a peer that failed it.
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if s.dialTLS != nil {
		c, err := tls.DialWithDialer(d, "tcp", string(addr), s.dialTLS)
		if err != nil {
			return nil, fmt.Errorf("cluster: raft TLS to %s: %w", addr, err)
		}
		return c, nil
	}
	return d.Dial("tcp", string(addr))
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

// peerOverrides makes this node dial some peers at other addresses than the configuration's
// (the jepsen harness routes each node pair through its own proxy to cut links).
type peerOverrides map[string]string

func (p peerOverrides) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := p[string(id)]; ok {
		return raft.ServerAddress(a), nil
	}
	return "", errNoOverride
}

// errNoOverride makes raft fall back to the address in its configuration.
var errNoOverride = errors.New("cluster: no address override")

// hostAddr is a Raft address as it was advertised, host name or IP address and port. It is
// kept as given rather than resolved once: the address is what the other nodes store and
// dial, and a name (a Kubernetes Service, a DNS record) must be looked up again on every dial,
// since the address behind it may change while the node keeps its identity.
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

// advertisedAddr checks an advertised Raft address: host:port, with a port, and not a
// wildcard (which other machines cannot dial).
func advertisedAddr(s string) (net.Addr, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("cluster: advertise raft address %q: want host:port", s)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("cluster: advertise raft address %q is a wildcard, which other nodes cannot dial", s)
	}
	return hostAddr(s), nil
}
