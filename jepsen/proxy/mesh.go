package proxy

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Link is an ordered pair of nodes: From dials To.
type Link struct{ From, To string }

// Mesh is one proxy per ordered pair of nodes.
type Mesh struct {
	nodes   []string
	addrs   map[string]string
	proxies map[Link]*Proxy

	mu      sync.Mutex
	cutMode Mode
}

// NewMesh starts a proxy for every ordered pair of the nodes, forwarding to raftAddrs[to].
func NewMesh(raftAddrs map[string]string) (*Mesh, error) {
	m := &Mesh{proxies: map[Link]*Proxy{}, cutMode: Blackhole, addrs: raftAddrs}
	for id := range raftAddrs {
		m.nodes = append(m.nodes, id)
	}
	sort.Strings(m.nodes)
	for _, from := range m.nodes {
		for _, to := range m.nodes {
			if from == to {
				continue
			}
			p, err := Listen(raftAddrs[to])
			if err != nil {
				m.Close()
				return nil, err
			}
			m.proxies[Link{from, to}] = p
		}
	}
	return m, nil
}

// SetCutMode chooses how cut links behave (Blackhole, the default, or Refuse).
func (m *Mesh) SetCutMode(mode Mode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cutMode = mode
}

// PeerAddrs is the value of --raft-peer-addrs for a node: each peer mapped to the proxy that
// node must dial, as "n1=<own raft addr>,n2=127.0.0.1:X,n3=127.0.0.1:Y". The node's own entry
// is its real address, so that every id resolves.
func (m *Mesh) PeerAddrs(from string) string {
	var parts []string
	for _, to := range m.nodes {
		if p, ok := m.proxies[Link{from, to}]; ok {
			parts = append(parts, to+"="+p.Addr())
		} else if to == from {
			parts = append(parts, to+"="+m.addrs[to])
		}
	}
	return strings.Join(parts, ",")
}

// Connect sets every link: the link a→b passes traffic iff connected(a, b).
func (m *Mesh) Connect(connected func(from, to string) bool) {
	m.mu.Lock()
	cut := m.cutMode
	m.mu.Unlock()
	for l, p := range m.proxies {
		if connected(l.From, l.To) {
			p.SetMode(Pass)
		} else {
			p.SetMode(cut)
		}
	}
}

// HealAll lets all traffic through.
func (m *Mesh) HealAll() { m.Connect(func(string, string) bool { return true }) }

// Partition splits the nodes into groups that can talk only within themselves. Nodes in no
// group are connected to everyone (a bridge between the groups).
func (m *Mesh) Partition(groups ...[]string) {
	group := map[string]int{}
	for i, g := range groups {
		for _, n := range g {
			group[n] = i
		}
	}
	m.Connect(func(a, b string) bool {
		ga, oka := group[a]
		gb, okb := group[b]
		return !oka || !okb || ga == gb
	})
}

// Cut reports the links that do not pass traffic, for logs.
func (m *Mesh) Cut() []Link {
	var out []Link
	for l, p := range m.proxies {
		if p.Mode() != Pass {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].From != out[j].From {
			return out[i].From < out[j].From
		}
		return out[i].To < out[j].To
	})
	return out
}

// Proxy returns the proxy of one link.
func (m *Mesh) Proxy(from, to string) (*Proxy, error) {
	p, ok := m.proxies[Link{from, to}]
	if !ok {
		return nil, fmt.Errorf("proxy: no link %s→%s", from, to)
	}
	return p, nil
}

// Close stops every proxy.
func (m *Mesh) Close() error {
	var errs []error
	for _, p := range m.proxies {
		if err := p.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
