package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// What a client that is not authenticated can make a node spend (docs/security.md): these
// tests check the bounds in-process; cmd/raftlock's edge tests measure memory and open files
// of agent processes.

// A follower that has not applied a token yet (its Raft traffic is held) still serves a
// request made with it: it asks the leader about the token before reading the body, forwards
// the request, and its audit entry names the accessor id the leader resolved. A token nobody
// knows, or none, is refused from the headers, at the leader and at the follower, without
// waiting for a body the client never sends, and the connection is closed.
func TestLaggingFollowerAuditsTheLeadersAccessor(t *testing.T) {
	dir := t.TempDir()
	path := func(id string) string { return filepath.Join(dir, id+".audit") }
	d, proxy := laggingCluster(t, true, func(c *config.Config) {
		c.AuditLog = path(c.ID)
		c.BodyReadTimeout = 3 * time.Second
	})
	root := d.ManagementToken()
	leadBy(t, d, 0, as(root))
	leader, lagging := d.Endpoints()[0], d.Endpoints()[2]

	proxy.hold(true)
	t.Cleanup(func() { proxy.hold(false) })
	var tok api.NewToken
	ok(t, doAs(t, root, http.MethodPost, leader+"/v1/acl/tokens", api.CreateTokenRequest{Description: "new", Policies: []string{"management"}}), http.StatusOK, &tok)
	var s api.Session
	ok(t, doAs(t, tok.SecretID, http.MethodPost, lagging+"/v1/sessions", api.CreateSessionRequest{TTL: "30s"}), http.StatusCreated, &s)
	ok(t, doAs(t, tok.SecretID, http.MethodDelete, lagging+"/v1/sessions/"+s.ID, nil), http.StatusOK, nil)

	if _, _, known := d.Agent(2).Node().ResolveToken(tok.SecretID); known {
		t.Fatal("the held follower applied the token: the test proved nothing")
	}
	proxy.hold(false)

	var got []string
	eventually(t, "the follower's audit entries", func() string {
		got = got[:0]
		for _, e := range readAudit(t, path(d.Agent(2).Node().ID())) {
			if strings.HasPrefix(e.Path, "/v1/sessions") && (e.Status == http.StatusCreated || e.Status == http.StatusOK) {
				got = append(got, fmt.Sprintf("%s %s %d %s", e.Method, e.Path, e.Status, e.AccessorID))
			}
		}
		if len(got) < 2 {
			return fmt.Sprintf("%q", got)
		}
		return ""
	})
	want := []string{
		fmt.Sprintf("POST /v1/sessions 201 %s", tok.AccessorID),
		fmt.Sprintf("DELETE /v1/sessions/%s 200 %s", s.ID, tok.AccessorID),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the follower audited\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The internal header never reaches a client.
	r := doAs(t, root, http.MethodPost, lagging+"/v1/sessions", api.CreateSessionRequest{TTL: "30s"})
	if r.status != http.StatusCreated || r.header.Get("X-Raftlock-Accessor") != "" {
		t.Fatalf("a forwarded answer: %d, X-Raftlock-Accessor %q", r.status, r.header.Get("X-Raftlock-Accessor"))
	}

	// A member's one-time publication of its address needs no token and answers nothing but its
	// status; another address for it is refused.
	var cl api.Cluster
	ok(t, doAs(t, root, http.MethodGet, leader+"/v1/cluster", nil), http.StatusOK, &cl)
	var member api.Member
	for _, m := range cl.Members {
		if m.ID == d.Agent(1).Node().ID() {
			member = m
		}
	}
	pub := api.AddMemberRequest{ID: member.ID, RaftAddr: member.RaftAddr, HTTPAddr: member.HTTPAddr}
	for _, ep := range []string{leader, lagging} {
		r := rawDo(http.MethodPost, ep+"/v1/cluster/members", pub, nil)
		if r.err != nil || r.status != http.StatusOK || len(r.body) != 0 {
			t.Fatalf("a publication through %s: %v %d %q; want 200 and no body", ep, r.err, r.status, r.body)
		}
		wrong := pub
		wrong.HTTPAddr = "127.0.0.1:1"
		refused(t, rawDo(http.MethodPost, ep+"/v1/cluster/members", wrong, nil), http.StatusUnauthorized, "needs a token")
	}

	// Refused from the headers: a body of 100 bytes is declared and never sent. The answer comes
	// before the body's read deadline (3s), and the connection is closed at the deadline.
	for _, ep := range []string{leader, lagging} {
		for _, hdr := range []string{"X-Raftlock-Token: not-a-token\r\n", ""} {
			head := "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n" + hdr + "\r\n"
			c, r := rawRequest(t, ep, head, "")
			res, body, took := readAnswer(t, c, r, 2*time.Second)
			if res.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), api.CodeUnauthorized) {
				t.Fatalf("%s with %q and no body: %s %s", ep, hdr, res.Status, body)
			}
			if !closedWithin(c, r, 6*time.Second) {
				t.Fatalf("%s kept the connection of a refused request open", ep)
			}
			t.Logf("%s refused %q in %v", ep, strings.TrimSpace(hdr), took)
		}
	}
}

// Requests without a token are rate-limited by the client's address as those with an unknown
// token are, and a refused one (429) is not audited; an audit entry holds a bounded part of
// the client's path and lock name, however long they are.
func TestTokenlessWritesAreLimitedAndAuditedShort(t *testing.T) {
	dir := t.TempDir()
	path := func(id string) string { return filepath.Join(dir, id+".audit") }
	d, _ := ownACLCluster(t, t.TempDir(), &syncBuffer{}, func(c *config.Config) { c.RateLimit, c.AuditLog = 2, path(c.ID) })
	leader, _ := roles(t, d)
	li, _ := d.WaitLeader(t.Context())
	file := path(d.Agent(li).Node().ID())
	before := int64(0)
	if fi, err := os.Stat(file); err == nil {
		before = fi.Size()
	}
	name := strings.Repeat("a/", 3000) + "x" // 6 KB, under the header limit
	const n = 40
	limited := 0
	for range n {
		r := rawDo(http.MethodPost, leader+"/v1/locks/"+name+"/acquire", `{"ttl":"10s"}`, nil)
		switch r.status {
		case http.StatusTooManyRequests:
			limited++
		case http.StatusUnauthorized:
		default:
			t.Fatalf("a tokenless acquire: %v %d %s", r.err, r.status, short(r.body))
		}
	}
	if limited == 0 {
		t.Fatalf("%d tokenless writes at once at 2/s: none limited", n)
	}
	var entries int
	eventually(t, "the audit entries of the tokenless writes", func() string {
		entries = 0
		for _, e := range readAudit(t, file) {
			if e.Status == http.StatusUnauthorized && strings.HasPrefix(e.Path, "/v1/locks/a/a/") {
				entries++
				if !e.Truncated || len(e.Path) > 256+64 || len(e.Lock) > 256 {
					t.Fatalf("an entry holds %d bytes of path and %d of lock name (truncated %v)", len(e.Path), len(e.Lock), e.Truncated)
				}
			}
		}
		if entries != n-limited {
			return fmt.Sprintf("%d entries, want %d", entries, n-limited)
		}
		return ""
	})
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if grown := fi.Size() - before; grown > int64(entries)*1024 {
		t.Fatalf("%d entries of long tokenless paths added %d bytes to the audit log", entries, grown)
	}
}

// The body limit holds in every mode, at the leader and at a follower, for a declared length
// and for a chunked body: 413 payload_too_large with the API's error body.
func TestBodyLimitInEveryMode(t *testing.T) {
	plain := sharedCluster(t)
	pl, pf := roles(t, plain)
	eps := aclCluster(t)
	big := strings.Repeat(" ", 200<<10)
	cases := []struct {
		ep, token string
	}{{pl, ""}, {pf[0], ""}, {eps[0], aclRoot}, {eps[1], aclRoot}, {eps[1], "not-a-token"}}
	for _, c := range cases {
		var hdr http.Header
		if c.token != "" {
			hdr = as(c.token)
		}
		declared := rawDo(http.MethodPost, c.ep+"/v1/sessions", big, hdr)
		apiError(t, declared, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
		chunked := rawDo(http.MethodPost, c.ep+"/v1/sessions", io.MultiReader(strings.NewReader(big)), hdr)
		if c.token == "not-a-token" {
			// Nothing declares the body too large: the token is judged first, and refused.
			apiError(t, chunked, http.StatusUnauthorized, api.CodeUnauthorized)
			continue
		}
		apiError(t, chunked, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	}
}

// A body sent a byte at a time is cut off at --body-read-timeout: the request is refused and
// its connection closed, at the leader and at a follower.
func TestSlowBodyIsCutOff(t *testing.T) {
	d := ownCluster(t, func(c *config.Config) { c.BodyReadTimeout = time.Second })
	leader, followers := roles(t, d)
	for _, ep := range []string{leader, followers[0]} {
		head := "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
		c, r := rawRequest(t, ep, head, `{"ttl":`)
		stop := make(chan struct{})
		go func() { // a byte every 200ms, for as long as the connection takes them
			for {
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
				if _, err := c.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		res, body, took := readAnswer(t, c, r, 8*time.Second)
		close(stop)
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "did not arrive within 1s") {
			t.Fatalf("%s: a slow body answered %s %s", ep, res.Status, body)
		}
		if !closedWithin(c, r, 5*time.Second) {
			t.Fatalf("%s kept the connection of a slow body open", ep)
		}
		t.Logf("%s cut a slow body off after %v", ep, took)
	}
	// A waiting acquire is not cut off by the body deadline once its body has arrived.
	s := session(t, leader)
	name := lockName(t)
	mustAcquire(t, leader, name, session(t, leader), nil)
	start := time.Now()
	r := do(t, http.MethodPost, followers[0]+"/v1/locks/"+name+"/acquire", acquireReq(s, "2500ms", nil))
	apiError(t, r, http.StatusConflict, api.CodeLockHeld, "holder")
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("a wait of 2.5s ended after %v", took)
	}
}

// A request's line and headers are bounded by --max-header-bytes (431 beyond), and a node
// keeps at most --max-connections open: the next one waits until one closes.
func TestHeaderAndConnectionLimits(t *testing.T) {
	d := ownCluster(t, func(c *config.Config) { c.MaxConnections = 16 })
	// A follower: no other node keeps connections to it. Nor does this test's client.
	_, followers := roles(t, d)
	ep := followers[0]
	httpClient.CloseIdleConnections()
	head := "GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Padding: " + strings.Repeat("p", 20<<10) + "\r\n\r\n"
	c, r := rawRequest(t, ep, head, "")
	if res, _, _ := readAnswer(t, c, r, 5*time.Second); res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("20 KB of headers: %s, want 431", res.Status)
	}
	// 16 idle connections, each after one answered request.
	health := "GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
	var idle []func()
	for range 16 {
		c, r := rawRequest(t, ep, health, "")
		if res, _, _ := readAnswer(t, c, r, 5*time.Second); res.StatusCode != http.StatusOK {
			t.Fatalf("health: %s", res.Status)
		}
		idle = append(idle, func() { c.Close() })
	}
	c, r = rawRequest(t, ep, health, "")
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := r.ReadByte(); err == nil {
		t.Fatal("a 17th connection was served while 16 were open, the limit")
	}
	idle[0]()
	if res, _, _ := readAnswer(t, c, r, 5*time.Second); res.StatusCode != http.StatusOK {
		t.Fatalf("the 17th connection, once one closed: %s", res.Status)
	}
}
