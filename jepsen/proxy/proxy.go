package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is what a proxy does with traffic.
type Mode int

// Modes.
const (
	// Pass forwards traffic.
	Pass Mode = iota
	// Blackhole accepts connections and swallows what they send, like a dead network: the
	// dialer sees timeouts, not errors.
	Blackhole
	// Refuse closes every connection as soon as it is accepted.
	Refuse
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Blackhole:
		return "blackhole"
	case Refuse:
		return "refuse"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// dialTimeout bounds how long the proxy waits for its target.
const dialTimeout = 2 * time.Second

// Proxy forwards TCP connections accepted on a loopback port to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	mode   Mode
	conns  map[net.Conn]struct{} // every open connection, accepted and dialed
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on a free port of 127.0.0.1 forwarding to target.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode is the proxy's current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// SetMode changes what the proxy does. Any change closes every open connection, so traffic in
// flight is lost and peers must dial again: a cut takes effect at once, and a heal does not
// leave peers stuck on black-holed connections.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	if p.mode == m {
		p.mu.Unlock()
		return
	}
	p.mode = m
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	err := p.ln.Close()
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // transient accept error, e.g. out of descriptors
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

// track registers a connection; false means the proxy changed mode or closed meanwhile.
func (p *Proxy) track(mode Mode, cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode != mode {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *Proxy) handle(c net.Conn) {
	defer p.wg.Done()
	mode := p.Mode()
	switch mode {
	case Refuse:
		c.Close()
		return
	case Blackhole:
		if !p.track(mode, c) {
			c.Close()
			return
		}
		io.Copy(io.Discard, c) // until the peer gives up or the mode changes
		p.untrack(c)
		return
	}
	up, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(mode, c, up) {
		c.Close()
		up.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done // one direction ended: end both
	p.untrack(c, up)
	<-done
}
