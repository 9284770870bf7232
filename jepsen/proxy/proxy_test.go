package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("bad echo " + line)
	}
	return nil
}

func TestProxyForwardsCutsAndHeals(t *testing.T) {
	p, err := Listen(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("pass: %v", err)
	}

	// A connection open across the cut is closed by it.
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x\n"))
	bufio.NewReader(c).ReadString('\n')
	p.SetMode(Blackhole)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("connection survived the cut")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("connection was not closed by the cut")
	}

	err = roundTrip(p.Addr())
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("blackhole must time out, got %v", err)
	}
	p.SetMode(Refuse)
	if err := roundTrip(p.Addr()); err == nil {
		t.Fatal("refuse let traffic through")
	}
	p.SetMode(Pass)
	if err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("healed: %v", err)
	}
}

func TestMeshPartitionWithBridge(t *testing.T) {
	addrs := map[string]string{}
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		addrs[n] = echoServer(t)
	}
	m, err := NewMesh(addrs)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetCutMode(Refuse)
	if got := strings.Count(m.PeerAddrs("n1"), "="); got != 5 {
		t.Fatalf("n1 has %d peers: %s", got, m.PeerAddrs("n1"))
	}
	m.Partition([]string{"n1", "n2"}, []string{"n4", "n5"}) // n3 bridges
	check := func(from, to string, want bool) {
		t.Helper()
		p, err := m.Proxy(from, to)
		if err != nil {
			t.Fatal(err)
		}
		if err := roundTrip(p.Addr()); (err == nil) != want {
			t.Errorf("%s→%s: reachable=%v, want %v (%v)", from, to, err == nil, want, err)
		}
	}
	check("n1", "n2", true)
	check("n1", "n3", true)
	check("n3", "n5", true)
	check("n1", "n4", false)
	check("n5", "n2", false)
	if got := len(m.Cut()); got != 8 {
		t.Errorf("%d links cut, want 8", got)
	}
	m.HealAll()
	check("n1", "n4", true)
	if len(m.Cut()) != 0 {
		t.Errorf("links still cut after heal: %v", m.Cut())
	}
}
