package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/config"
)

// holdProxy passes TCP traffic to a target until held: then it forwards nothing more, in
// either direction, until released (what it read meanwhile is delivered then).
type holdProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	held   bool
	cond   *sync.Cond
	conns  []net.Conn
}

func startHoldProxy(t *testing.T, target string) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holdProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(p.close)
	go p.serve()
	return p
}

func (p *holdProxy) addr() string { return p.ln.Addr().String() }

func (p *holdProxy) hold(on bool) {
	p.mu.Lock()
	p.held = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *holdProxy) close() {
	p.ln.Close()
	p.hold(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *holdProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(u, c)
		go p.pipe(c, u)
	}
}

func (p *holdProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.held {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// laggingCluster starts a three-node cluster whose third node (n3) receives Raft traffic
// through a holdProxy: holding it keeps n3 from applying anything new while it still follows
// the leader it knows (for a heartbeat timeout, here 3 to 6 seconds). Make another node lead
// (leadBy) before holding it.
func laggingCluster(t *testing.T, acl bool, tune func(*config.Config)) (*agent.Dev, *holdProxy) {
	t.Helper()
	var proxy *holdProxy
	opts := devOptions(func(c *config.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 3*time.Second, 3*time.Second, time.Second
		if c.ID == "n1" {
			proxy = startHoldProxy(t, c.InitialCluster["n3"])
		}
		if c.ID != "n3" {
			c.RaftPeerAddrs = map[string]string{"n3": proxy.addr()}
		}
		if tune != nil {
			tune(c)
		}
	})
	opts.ACL = acl
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := agent.StartDev(ctx, opts)
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d, proxy
}

// leadBy makes node i lead, by asking the current leader to hand over to it.
func leadBy(t *testing.T, d *agent.Dev, i int, hdr http.Header) {
	t.Helper()
	want := d.Agent(i).Node().ID()
	eventually(t, want+" leads", func() string {
		li, err := d.WaitLeader(t.Context())
		if err != nil {
			return err.Error()
		}
		if li == i {
			return ""
		}
		r := rawDo(http.MethodPost, d.Endpoints()[li]+"/v1/cluster/leadership-transfer", fmt.Sprintf(`{"id":%q}`, want), hdr)
		return fmt.Sprintf("transfer: %v %d %s", r.err, r.status, short(r.body))
	})
	if err := settleWith(d, hdr); err != nil {
		t.Fatal(err)
	}
}

// rawRequest writes a request's line and headers on a new connection, then body (which may be
// shorter than the Content-Length it declares), and returns the connection and a reader of
// its answers.
func rawRequest(t *testing.T, url, head, body string) (net.Conn, *bufio.Reader) {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, head+body); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// readAnswer reads one answer from r within wait; it fails the test if none came.
func readAnswer(t *testing.T, c net.Conn, r *bufio.Reader, wait time.Duration) (*http.Response, []byte, time.Duration) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(wait))
	res, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", wait, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b, time.Since(start)
}

// closedWithin says whether the peer closes the connection within wait (nothing more to read).
func closedWithin(c net.Conn, r *bufio.Reader, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}
