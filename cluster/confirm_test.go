package cluster_test

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
)

// A linearizable read (and a renewal) is confirmed only by messages sent after it arrived. With
// every follower's answers delayed by d, a heartbeat is nearly always in flight when a read
// arrives, and its answer comes less than d later: raft's VerifyLeader counts it, although the
// follower may have accepted it long before the read arrived, when a newer leader could already
// have been elected. A confirmation that rests on messages sent after the read arrived cannot
// come back in less than d.
func TestReadBarrierRestsOnMessagesSentAfterItBegan(t *testing.T) {
	const d = 200 * time.Millisecond
	var delay atomic.Int64
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		// Answers d late must not depose the leader.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
		cfg.PeerAddrs = map[string]string{}
		for id, addr := range cfg.InitialCluster {
			if id != cfg.ID {
				cfg.PeerAddrs[id] = startDelayProxy(t, addr, &delay)
			}
		}
	})
	_, leader := c.waitLeader()
	delay.Store(int64(d))
	// Let connections made before the delay was set carry a delayed answer first.
	if err := leader.ReadBarrier(opContext(t)); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		began := time.Now()
		if err := leader.ReadBarrier(opContext(t)); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if took := time.Since(began); took < d {
			t.Fatalf("read %d confirmed after %v, before any message sent after it could be answered (%v)", i, took, d)
		}
		if _, err := leader.Renew(opContext(t), createSession(t, leader, "s", longTTL, 0)); err != nil {
			t.Fatalf("renew %d: %v", i, err)
		}
	}
}

// startDelayProxy forwards connections to target and holds everything target answers for the
// current value of delay (nanoseconds) before passing it on, in order. It stops with the test.
func startDelayProxy(t testing.TB, target string, delay *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer wg.Done(); delayedCopy(in, out, delay); in.Close() }()
		}
	}()
	return ln.Addr().String()
}

// delayedCopy copies src to dst, writing each chunk delay after it was read.
func delayedCopy(dst io.Writer, src io.Reader, delay *atomic.Int64) {
	type chunk struct {
		data []byte
		due  time.Time
	}
	chunks := make(chan chunk, 1024)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				chunks <- chunk{buf[:n], time.Now().Add(time.Duration(delay.Load()))}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		time.Sleep(time.Until(c.due))
		if _, err := dst.Write(c.data); err != nil {
			for range chunks { // drain, so that the reader ends
			}
			return
		}
	}
}
