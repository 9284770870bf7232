package cluster

import (
	"errors"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's stream layer over a listener the caller may have bound already, so that
// tests and the dev cluster can use port 0 and still know every address before raft starts.
type streamLayer struct {
	net.Listener
	advertise net.Addr
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
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
