package client_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/devtest"
	"github.com/raftlock/raftlock/internal/testkit"
)

// shared is one in-process cluster used by the tests that do not hurt it.
var shared devtest.Shared

func TestMain(m *testing.M) { os.Exit(testkit.Main(m, shared.Close)) }

// sharedCluster returns the shared three-node cluster, starting it on first use.
func sharedCluster(t *testing.T) *agent.Dev { return shared.Get(t) }

// ownCluster starts a three-node cluster for one test, which may crash its nodes.
func ownCluster(t *testing.T) *agent.Dev {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{})
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// newClient returns a client for endpoints, closed at the end of the test.
func newClient(t *testing.T, endpoints []string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(endpoints, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newSession returns a session closed at the end of the test.
// crashLeader kills the Raft leader node (no graceful leave) and waits for a new leader.
func crashLeader(ctx context.Context, t *testing.T, dev *agent.Dev) {
	t.Helper()
	leader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
}

func newSession(t *testing.T, c *client.Client, opts ...client.SessionOption) *client.Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// lockedMutex returns a Mutex for name on a new session of c, with the lock taken.
func lockedMutex(ctx context.Context, t *testing.T, c *client.Client, name string, opts ...client.SessionOption) *client.Mutex {
	t.Helper()
	m := client.NewMutex(newSession(t, c, opts...), name)
	if err := m.Lock(ctx); err != nil {
		t.Fatalf("locking %q: %v", name, err)
	}
	return m
}

// testCtx returns a context that ends with the test, or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// lockName gives each test its own lock.
func lockName(t *testing.T, suffix string) string {
	return fmt.Sprintf("test/%s/%s", t.Name(), suffix)
}

// cutProxy forwards TCP connections to a target until cut: then it drops every connection
// and refuses new ones, as a network partition between the client and that node would.
type cutProxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	cut      bool
	stranded bool
	conns    map[net.Conn]struct{}
	clients  map[net.Conn]struct{} // the clients' side of conns
	wg       sync.WaitGroup
	// hold, if set, may take a new client connection instead of forwarding it (holdProxy).
	hold func(net.Conn) bool
}

// newCutProxy starts a proxy to the host:port of endpoint and returns it; closed with the test.
func newCutProxy(t *testing.T, endpoint string) *cutProxy { return startProxy(t, endpoint, nil) }

// startProxy starts a cutProxy whose hold, if not nil, may take new connections.
func startProxy(t *testing.T, endpoint string, hold func(net.Conn) bool) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := endpoint[len("http://"):]
	p := &cutProxy{ln: ln, target: host, conns: map[net.Conn]struct{}{}, clients: map[net.Conn]struct{}{}, hold: hold}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Endpoint is the proxy's URL.
func (p *cutProxy) Endpoint() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.clients[c] = struct{}{}
		p.mu.Unlock()
		if p.hold != nil && p.hold(c) {
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil || !p.track(up) {
			c.Close()
			if up != nil {
				up.Close()
			}
			continue
		}
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(dst, src)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range []net.Conn{dst, src} {
		if _, client := p.clients[c]; client || !p.stranded {
			c.Close()
		}
	}
}

// Strand drops the clients' side of every connection and refuses new ones, but keeps the
// servers' side open and silent until the proxy closes, as a network that loses a connection
// without the server noticing: a request the server holds stays held until its wait ends.
func (p *cutProxy) Strand() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.stranded = true, true
	for c := range p.clients {
		c.Close()
	}
}

// Cut drops every connection and refuses new ones.
func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Heal forwards new connections again after Cut or Strand; stranded ones stay stranded.
func (p *cutProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *cutProxy) close() {
	p.mu.Lock()
	p.stranded = false
	p.mu.Unlock()
	p.Cut()
	p.ln.Close()
	p.wg.Wait()
}

// proxiedEndpoints returns one proxy per endpoint of dev.
func proxiedEndpoints(t *testing.T, dev *agent.Dev) (proxySet, []string) {
	var ps proxySet
	var eps []string
	for _, ep := range dev.Endpoints() {
		p := newCutProxy(t, ep)
		ps = append(ps, p)
		eps = append(eps, p.Endpoint())
	}
	return ps, eps
}

// holdProxy forwards connections like a cutProxy, except those made while it holds: it keeps
// their requests instead, as a network that delays a request until after its client gave up
// would. Deliver sends a held request to the target on a new connection.
type holdProxy struct {
	*cutProxy

	hmu     sync.Mutex
	holding bool
	held    []*[]byte     // one buffer per held connection
	arrived chan struct{} // closed when a held buffer first contains want
	want    string
}

// newHoldProxy starts a holdProxy to endpoint, closed with the test.
func newHoldProxy(t *testing.T, endpoint, want string) *holdProxy {
	t.Helper()
	p := &holdProxy{arrived: make(chan struct{}), want: want}
	p.cutProxy = startProxy(t, endpoint, p.keep)
	return p
}

// Hold holds the connections made from now on; Pass forwards them again.
func (p *holdProxy) Hold() { p.setHolding(true) }

// Pass forwards the connections made from now on.
func (p *holdProxy) Pass() { p.setHolding(false) }

func (p *holdProxy) setHolding(on bool) {
	p.hmu.Lock()
	defer p.hmu.Unlock()
	p.holding = on
}

// keep takes a new connection to hold, if the proxy holds.
func (p *holdProxy) keep(c net.Conn) bool {
	p.hmu.Lock()
	defer p.hmu.Unlock()
	if !p.holding {
		return false
	}
	buf := new([]byte)
	p.held = append(p.held, buf)
	go func() {
		chunk := make([]byte, 4096)
		for {
			n, err := c.Read(chunk)
			p.hmu.Lock()
			had := strings.Contains(string(*buf), p.want)
			*buf = append(*buf, chunk[:n]...)
			if !had && strings.Contains(string(*buf), p.want) {
				close(p.arrived)
			}
			p.hmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return true
}

// holdingClient returns a client whose requests go through a holdProxy to endpoint, one
// connection per request so that the proxy can hold a request alone; want marks the request
// to hold: one that carries an attempt.
func holdingClient(t *testing.T, endpoint string, opts ...client.Option) (*holdProxy, *client.Client) {
	t.Helper()
	p := newHoldProxy(t, endpoint, attemptMark)
	c := newClient(t, []string{p.Endpoint()}, append([]client.Option{
		client.WithTransport(&http.Transport{DisableKeepAlives: true})}, opts...)...)
	return p, c
}

// Arrived is closed once a held connection's bytes contain want.
func (p *holdProxy) Arrived() <-chan struct{} { return p.arrived }

// Deliver writes the held request that contains want to the target and returns the answer.
func (p *holdProxy) Deliver(ctx context.Context) (int, string, error) {
	var req []byte
	p.hmu.Lock()
	for _, b := range p.held {
		if strings.Contains(string(*b), p.want) {
			req = slices.Clone(*b)
		}
	}
	p.hmu.Unlock()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.target)
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := c.Write(req); err != nil {
		return 0, "", err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, string(body), err
}
