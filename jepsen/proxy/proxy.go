package proxy

import (
	"fmt"
	"io"
	"net"
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
	gate
}

// Listen starts a proxy on a free port of 127.0.0.1 forwarding to target.
func Listen(target string) (*Proxy, error) {
	p := &Proxy{}
	if err := p.listen(target); err != nil {
		return nil, err
	}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// SetMode changes what the proxy does. Any change closes every open connection, so traffic in
// flight is lost and peers must dial again: a cut takes effect at once, and a heal does not
// leave peers stuck on black-holed connections.
func (p *Proxy) SetMode(m Mode) { p.setMode(m) }

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() error {
	err := p.shut()
	p.wg.Wait()
	return err
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, ok := p.accept()
		if !ok {
			return
		}
		p.wg.Add(1)
		go p.handle(c)
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
		p.swallow(c)
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
