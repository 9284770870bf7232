package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// heapAndStacks is what the process holds in its heap and goroutine stacks, after a GC.
func heapAndStacks() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse, runtime.NumGoroutine()
}

// openRawStreams opens n streams on the node at ep over raw TCP connections that read their
// first event and then nothing (a client that costs the benchmark no goroutine and no buffer),
// each with the given request; it returns the connections.
func openRawStreams(b *testing.B, ep string, n int, request func(i int) string) []net.Conn {
	b.Helper()
	addr := strings.TrimPrefix(ep, "http://")
	conns := make([]net.Conn, 0, n)
	buf := make([]byte, 64<<10)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write([]byte(request(i))); err != nil {
			b.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(deadline))
		got := 0
		for !bytes.Contains(buf[:got], []byte("event: reset")) {
			k, err := c.Read(buf[got:])
			if err != nil {
				b.Fatalf("stream %d: %v after %q", i, err, buf[:got])
			}
			got += k
		}
		conns = append(conns, c)
	}
	return conns
}

// The memory a node spends on each waiting stream (one prefix), and on each watching of
// streams that follow many prefixes: heap and goroutine stacks together, the HTTP server's own
// connection goroutine and buffers included; the clients are raw connections that cost next to
// nothing (their sockets are counted against the streams). Run it alone:
//
//	go test -run '^$' -bench BenchmarkStreamMemory -benchtime 1x ./httpapi/
func BenchmarkStreamMemory(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := agent.StartDev(ctx, devOptions(func(c *config.Config) {
		c.MaxWatchesPerAddr, c.MaxWatchesPerToken, c.MaxConnections = 0, 0, 0
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if err := settle(d); err != nil {
		b.Fatal(err)
	}
	li, err := d.WaitLeader(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ep := d.Endpoints()[(li+1)%d.Size()] // a follower serves its own streams
	const streams, multi, prefixes = 2000, 100, 100
	for range b.N {
		mem0, g0 := heapAndStacks()
		one := openRawStreams(b, ep, streams, func(i int) string {
			return fmt.Sprintf("GET /v1/locks?prefix=bench/%d/&index=0&stream=1 HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n", i)
		})
		mem1, g1 := heapAndStacks()
		many := openRawStreams(b, ep, multi, func(i int) string {
			var req api.WatchRequest
			for k := range prefixes {
				req.Prefixes = append(req.Prefixes, fmt.Sprintf("bench/multi/%d/%d/", i, k))
			}
			body, _ := json.Marshal(req)
			return fmt.Sprintf("POST /v1/watch HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		})
		mem2, g2 := heapAndStacks()
		perStream := float64(mem1-mem0) / streams
		perWatching := (float64(mem2-mem1) - multi*perStream) / (multi * prefixes)
		b.ReportMetric(perStream, "B/stream")
		b.ReportMetric(float64(g1-g0)/streams, "goroutines/stream")
		b.ReportMetric(perWatching, "B/watching")
		b.ReportMetric(float64(g2-g1)/multi, "goroutines/multistream")
		for _, c := range append(one, many...) {
			c.Close()
		}
	}
}
