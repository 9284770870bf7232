package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/httpapi"
)

// With TLS, only another node (a node certificate of the cluster's CA) may mark a request as
// forwarded: a client that sends X-Raftlock-Forwarded straight to the leader is rate-limited
// and audited there like any client, and the same mark sent to a follower is forwarded as
// usual rather than refused; requests a follower really forwards still pass the leader's
// limiter and are audited only by the follower. The API asks for a client certificate even
// without --tls-verify-clients, so that the nodes' forwarded requests are told apart there too.
func TestForwardedMarkNeedsANodeCertificate(t *testing.T) {
	for _, verify := range []bool{true, false} {
		t.Run(fmt.Sprintf("verify-clients=%v", verify), func(t *testing.T) { testForwardedMark(t, verify) })
	}
}

func testForwardedMark(t *testing.T, verifyClients bool) {
	dir := t.TempDir()
	audit := func(id string) string { return filepath.Join(dir, id+".audit") }
	opts := devOptions(func(c *config.Config) {
		c.TLSVerifyClients = verifyClients
		c.RateLimit = 0.5 // burst 1, Retry-After 2
		c.AuditLog = audit(c.ID)
	})
	opts.TLS = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, opts)
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	li, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fi := (li + 1) % d.Size()
	leader, follower := d.Endpoints()[li], d.Endpoints()[fi]
	leaderID, followerID := d.Agent(li).Node().ID(), d.Agent(fi).Node().ID()
	eventually(t, "the follower to know the leader's address", func() string {
		if _, addr := d.Agent(fi).Node().Leader(); addr == "" {
			return "no leader address"
		}
		return ""
	})

	files, _ := d.TLSFiles()
	cfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: deadline, Transport: &http.Transport{TLSClientConfig: cfg}}
	t.Cleanup(hc.CloseIdleConnections)
	post := func(url string, forged bool) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, url+"/v1/sessions", strings.NewReader(`{"ttl":"10s"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if forged {
			req.Header.Set(api.HeaderForwarded, followerID)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		return resp.StatusCode
	}
	sessionEntries := func(path string) []httpapi.AuditEntry {
		var out []httpapi.AuditEntry
		for _, e := range readAudit(t, path) {
			if e.Path == "/v1/sessions" {
				out = append(out, e)
			}
		}
		return out
	}
	waitEntries := func(path string, n int) []httpapi.AuditEntry {
		t.Helper()
		var got []httpapi.AuditEntry
		eventually(t, fmt.Sprintf("%d session entries in %s", n, filepath.Base(path)), func() string {
			if got = sessionEntries(path); len(got) < n {
				return fmt.Sprintf("%d entries: %+v", len(got), got)
			}
			return ""
		})
		return got
	}

	// A client's forged mark, straight to the leader: limited and audited there. The leader's
	// budget for 127.0.0.1 may have gone on the followers' publications: wait until a forged
	// write passes, then send three more at once, of which the limiter must refuse some. A
	// refused one (429) is not audited: the limit bounds the audit log's growth too.
	var statuses []int
	eventually(t, "a forged write to the leader passes its limiter", func() string {
		s := post(leader, true)
		if s == http.StatusCreated {
			statuses = append(statuses, s)
			return ""
		}
		return fmt.Sprintf("status %d", s)
	})
	for range 3 {
		statuses = append(statuses, post(leader, true))
	}
	var created []int
	for _, s := range statuses {
		switch s {
		case http.StatusCreated:
			created = append(created, s)
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("forged mark to the leader answered %d", s)
		}
	}
	if len(created) == len(statuses) {
		t.Fatalf("four forged writes to the leader at once, none limited: %v", statuses)
	}
	got := waitEntries(audit(leaderID), len(created))
	if len(got) != len(created) {
		t.Fatalf("the leader audited %d session requests, want the %d it let through: %+v", len(got), len(created), got)
	}
	for i, e := range got {
		if e.Node != leaderID || e.Status != http.StatusCreated || e.Remote != "127.0.0.1" {
			t.Errorf("leader's entry %d = %+v, want status 201", i, e)
		}
	}

	// A request the follower really forwards passes the leader's limiter, which the client
	// exhausted above, and is audited by the follower only.
	if s := post(follower, false); s != http.StatusCreated {
		t.Fatalf("a write through the follower answered %d", s)
	}
	if f := waitEntries(audit(followerID), 1); f[0].Status != http.StatusCreated {
		t.Fatalf("follower's entry %+v", f[0])
	}

	// The forged mark sent to a follower: handled as a client's request (limited there, or
	// forwarded), never refused as a forwarded request that reached a non-leader.
	switch s := post(follower, true); s {
	case http.StatusCreated:
		waitEntries(audit(followerID), 2)
	case http.StatusTooManyRequests:
	default:
		t.Fatalf("forged mark to the follower answered %d", s)
	}
	if n := len(sessionEntries(audit(leaderID))); n != len(created) {
		t.Fatalf("the leader audited %d session requests, want only the %d sent to it and let through", n, len(created))
	}
}
