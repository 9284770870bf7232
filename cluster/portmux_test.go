package cluster_test

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
)

// With APIOnRaftPort, one port carries both Raft and HTTP: the cluster elects and replicates,
// an HTTP request to a node's Raft address reaches what serves its APIListener, and a
// connection that never sends a byte holds up neither of them nor the node's Close.
func TestRaftPortCarriesTheAPITooWhenAsked(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *cluster.Config) { cfg.APIOnRaftPort = true })
	servers := make([]*http.Server, 3)
	for i := range 3 {
		id := c.ids[i]
		servers[i] = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "api of "+id)
		})}
		go func() { _ = servers[i].Serve(c.node(i).APIListener()) }()
		t.Cleanup(func() { servers[i].Close() })
	}
	silent, err := net.Dial("tcp", c.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	_, leader := c.waitLeader()
	s := createSession(t, leader, "s", longTTL, 0)
	mustAcquire(t, leader, s, "a", "v")
	for i := range 3 {
		res, err := (&http.Client{Timeout: opTimeout}).Get("http://" + c.addrs[i] + "/v1/health")
		if err != nil {
			t.Fatalf("HTTP to the Raft port of %s: %v", c.ids[i], err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(body) != "api of "+c.ids[i] {
			t.Fatalf("HTTP to the Raft port of %s answered %q", c.ids[i], body)
		}
	}
	c.waitConverged()
	closed := make(chan struct{})
	go func() { c.kill(0); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited for the silent connection's first byte")
	}
}
