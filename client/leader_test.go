package client_test

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/client"
)

// forwardedCount reads raftlock_http_forwarded_requests_total from the node at endpoint.
func forwardedCount(t *testing.T, endpoint string) int {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "raftlock_http_forwarded_requests_total "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		}
	}
	t.Fatalf("%s/metrics has no raftlock_http_forwarded_requests_total", endpoint)
	return 0
}

// forwardedBy sums the forwarded requests of the nodes at endpoints, skipping skip.
func forwardedBy(t *testing.T, endpoints []string, skip string) int {
	n := 0
	for _, ep := range endpoints {
		if ep != skip {
			n += forwardedCount(t, ep)
		}
	}
	return n
}

// followersFirst returns the cluster's endpoints with the leader's last, and the leader's.
func followersFirst(ctx context.Context, t *testing.T, dev *agent.Dev) ([]string, string) {
	t.Helper()
	leader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eps := dev.Endpoints()
	lead := eps[leader]
	eps = slices.DeleteFunc(slices.Clone(eps), func(s string) bool { return s == lead })
	return append(eps, lead), lead
}

// reads makes n linearizable reads, which a follower forwards to the leader.
func reads(ctx context.Context, t *testing.T, c *client.Client, n int) {
	t.Helper()
	for range n {
		if _, err := c.Cluster(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func TestClientMovesToTheLeader(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	dev := ownCluster(t)
	eps, lead := followersFirst(ctx, t, dev)

	// Listed first, a follower gets the first request and forwards it; its answer names the
	// leader, and every later request goes to the leader itself.
	c := newClient(t, eps)
	before := forwardedBy(t, eps, lead)
	reads(ctx, t, c, 20)
	if got := forwardedBy(t, eps, lead) - before; got != 1 {
		t.Fatalf("followers forwarded %d of 20 requests, want only the first", got)
	}

	// Without leader routing the client stays where it was told, and pays the hop each time.
	stay := newClient(t, eps, client.WithoutLeaderRouting())
	before = forwardedBy(t, eps, lead)
	reads(ctx, t, stay, 20)
	if got := forwardedBy(t, eps, lead) - before; got != 20 {
		t.Fatalf("followers forwarded %d of 20 requests of a client without leader routing, want 20", got)
	}

	// When the leader dies, the client fails over to a follower, which names the new leader;
	// after that, requests go to the new leader again.
	crashLeader(ctx, t, dev)
	reads(ctx, t, c, 1)
	newLeader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := slices.DeleteFunc(slices.Clone(eps), func(s string) bool { return s == lead })
	before = forwardedBy(t, live, dev.Endpoints()[newLeader])
	reads(ctx, t, c, 20)
	if got := forwardedBy(t, live, dev.Endpoints()[newLeader]) - before; got != 0 {
		t.Fatalf("after the failover, followers forwarded %d of 20 requests, want 0", got)
	}
}

// A client whose endpoints are not the members' addresses (proxies here) keeps their order.
func TestClientKeepsEndpointsThatAreNotMembers(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	dev := sharedCluster(t)
	eps, lead := followersFirst(ctx, t, dev)
	c := newClient(t, []string{newCutProxy(t, eps[0]).Endpoint(), newCutProxy(t, lead).Endpoint()})
	before := forwardedCount(t, eps[0])
	reads(ctx, t, c, 5)
	if got := forwardedCount(t, eps[0]) - before; got < 5 {
		t.Fatalf("the follower behind the proxy forwarded %d of 5 requests, want all: the client left the proxy", got)
	}
}
