package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// A node that restarted and has not replayed its log yet (here: no quorum to learn the commit
// index from) does not know a token created before; it must not answer the token's absence
// from that state. Every way a request may reach it with the token — a stale read, a stale
// watch, a request marked as forwarded by another node, a linearizable read — is answered
// 503 (retryable), never 401; once the cluster is back, the same requests succeed.
func TestRestartedNodeNeverRefusesAKnownToken(t *testing.T) {
	d, root := ownACLCluster(t, t.TempDir(), &syncBuffer{}, nil)
	li, _ := d.WaitLeader(t.Context())
	leader := d.Endpoints()[li]
	var tok api.NewToken
	ok(t, doAs(t, root, http.MethodPost, leader+"/v1/acl/tokens", api.CreateTokenRequest{Description: "watcher", Policies: []string{api.ManagementPolicy}}), http.StatusOK, &tok)
	a, b := (li+1)%3, (li+2)%3
	eventually(t, "every node knows the token", func() string {
		for i := range 3 {
			if _, _, known := d.Agent(i).Node().ResolveToken(tok.SecretID); !known {
				return d.Agent(i).Node().ID() + " does not"
			}
		}
		return ""
	})
	// Stop everything, then start one node alone: it restores its last snapshot (none holds
	// the token) and cannot learn what of its log is committed.
	for _, i := range []int{b, li, a} {
		if err := d.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Restart(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, known := d.Agent(a).Node().ResolveToken(tok.SecretID); known {
		t.Fatal("the restarted node knows the token from its snapshot: the test proved nothing")
	}
	ep := d.Endpoints()[a]
	forwarded := as(tok.SecretID)
	forwarded.Set(api.HeaderForwarded, "n9")
	requests := []struct {
		what, path string
		hdr        http.Header
	}{
		{"a stale read", "/v1/cluster?consistency=stale", as(tok.SecretID)},
		{"a stale watch", "/v1/locks?prefix=w/&index=1&wait=1s&consistency=stale", as(tok.SecretID)},
		{"a forwarded read", "/v1/cluster", forwarded},
		{"a read", "/v1/locks", as(tok.SecretID)},
	}
	send := func(path string, hdr http.Header) response {
		if hdr.Get(api.HeaderForwarded) != "" {
			return plainDo(http.MethodGet, ep+path, hdr)
		}
		return rawDo(http.MethodGet, ep+path, nil, hdr)
	}
	for _, r := range requests {
		got := send(r.path, r.hdr)
		if got.err != nil {
			t.Fatalf("%s: %v", r.what, got.err)
		}
		if got.status != http.StatusServiceUnavailable {
			t.Fatalf("%s on a node that has not replayed its log: %d %s, want 503", r.what, got.status, short(got.body))
		}
	}
	// A token nobody created is refused by no node that cannot confirm it either.
	if got := rawDo(http.MethodGet, ep+"/v1/cluster?consistency=stale", nil, as("not-a-token")); got.status != http.StatusServiceUnavailable {
		t.Fatalf("an unknown token on a node that cannot confirm: %d %s, want 503", got.status, short(got.body))
	}
	for _, i := range []int{li, b} {
		if err := d.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the restarted node serves the token", func() string {
		for _, r := range requests {
			got := send(r.path, r.hdr)
			switch {
			case got.status == http.StatusUnauthorized:
				t.Fatalf("%s after the restart: 401 %s", r.what, short(got.body))
			case r.hdr.Get(api.HeaderForwarded) != "" && got.status == http.StatusServiceUnavailable:
				// Answered only by the leader; this node may not lead.
			case got.status != http.StatusOK:
				return r.what + ": " + short(got.body)
			}
		}
		return ""
	})
	// Once confirmed, the leader refuses a token nobody created.
	l2, _ := d.WaitLeader(t.Context())
	refused(t, rawDo(http.MethodGet, d.Endpoints()[l2]+"/v1/cluster?consistency=stale", nil, as("not-a-token")), http.StatusUnauthorized, "unknown")
}
