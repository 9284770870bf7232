package embed_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/embed"
)

// The benchmarks compare the ways a process can reach the node it embeds, on the same node of
// a three-node cluster:
//
//   - in-process: Node.Client, whose requests are handed to the API's handler in memory;
//   - pipe: the same handler behind an http.Server on an in-memory net.Pipe listener (the other
//     way to skip the kernel: HTTP/1.1 is still written and parsed, on a synchronous pipe);
//   - http: the ordinary client over loopback TCP, to the node's HTTPAddr.
//
// go test ./embed -run '^$' -bench . -benchtime 2s -count 3
//
// Absolute figures move with the machine's load; compare them as ratios within one run.

// benchGroup starts a three-node cluster whose nodes also serve HTTP on a free port, and
// returns it with the node to measure on (the leader, or a follower) and that node's address.
func benchGroup(b *testing.B, onLeader bool) (*embed.Node, string) {
	b.Helper()
	g := startGroup(b, 3, func(i int, c *embed.Config) { c.HTTPAddr = "127.0.0.1:0" })
	i := g.leader()
	if !onLeader {
		i = g.follower()
	}
	return g.nodes[i], g.nodes[i].HTTPAddr()
}

// transports returns, for node n serving HTTP on httpAddr, one client per way of reaching it.
func transports(b *testing.B, n *embed.Node, httpAddr string) map[string]*client.Client {
	b.Helper()
	pl := newPipeListener()
	srv := &http.Server{Handler: n.Handler()}
	go func() { _ = srv.Serve(pl) }()
	b.Cleanup(func() { srv.Close() })
	pipe, err := client.New([]string{"http://pipe"}, client.WithTransport(&http.Transport{
		DialContext: pl.dial, MaxIdleConnsPerHost: 128}))
	if err != nil {
		b.Fatal(err)
	}
	overHTTP, err := client.New([]string{"http://" + httpAddr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pipe.Close(); overHTTP.Close() })
	return map[string]*client.Client{"in-process": n.Client(), "pipe": pipe, "http": overHTTP}
}

// BenchmarkAcquireRelease measures uncontended Mutex Lock and Unlock cycles, each goroutine
// on a lock and session of its own (GOMAXPROCS × -cpu goroutines; 16 with -cpu 8 on two
// cores), on the leader and on a follower (which forwards both to the leader over the
// network, whatever the transport). cpu-µs/op is the CPU time of the whole process, all
// three nodes included, per cycle.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, where := range []string{"leader", "follower"} {
		n, addr := benchGroup(b, where == "leader")
		cs := transports(b, n, addr)
		for _, name := range []string{"in-process", "pipe", "http"} {
			b.Run(where+"/"+name, func(b *testing.B) {
				var seq atomic.Int64
				cpu := processCPU()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					s, err := cs[name].NewSession(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					defer s.Close(ctx)
					m := client.NewMutex(s, fmt.Sprintf("bench/%s/%s/%d", where, name, seq.Add(1)))
					for pb.Next() {
						if err := m.Lock(ctx); err != nil {
							b.Error(err)
							return
						}
						if err := m.Unlock(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op")
			})
		}
	}
}

// processCPU returns the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStaleRead measures a read the node answers alone (?consistency=stale): the cost of
// the way in and out, with no Raft round behind it.
func BenchmarkStaleRead(b *testing.B) {
	n, addr := benchGroup(b, true)
	cs := transports(b, n, addr)
	for _, name := range []string{"in-process", "pipe", "http"} {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			cpu := processCPU()
			defer func() { b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/op") }()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cs[name].GetLock(ctx, "bench/read", client.Stale()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// pipeListener is a net.Listener whose connections are net.Pipe pairs made by dial.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
