package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// The console listener (--console-addr) on a cluster whose API port requires client
// certificates: a browser without one loads /ui/ and, with a token, uses the API through it,
// on the leader and through a follower; without a token every API call is refused, health
// included; nothing meant for the members is served (a publication without a token, the ACL
// bootstrap, a member's view of itself, /metrics, pprof, the forwarded mark), and it speaks no
// Raft.
func TestConsoleListenerNeedsATokenNotACertificate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, ACL: true, Console: true,
		Tune: func(c *config.Config) { c.TLSVerifyClients, c.EnablePprof = true, true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	files, _ := dev.TLSFiles()
	leader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := (leader + 1) % dev.Size()
	consoles := dev.ConsoleEndpoints()
	if len(consoles) != dev.Size() || consoles[f] != dev.Agent(f).ConsoleEndpoint() {
		t.Fatalf("console endpoints %q, node %d says %q", consoles, f, dev.Agent(f).ConsoleEndpoint())
	}
	noCert := tlsConfig(t, files, false)
	hc := httpsClient(noCert)
	t.Cleanup(hc.CloseIdleConnections)
	mgmt := dev.ManagementToken()

	type answer struct {
		status int
		body   string
		header http.Header
	}
	call := func(method, url, token string, body any, hdr map[string]string) answer {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return answer{res.StatusCode, string(b), res.Header}
	}

	// The API port refuses a client without a certificate in the handshake: that is what the
	// console listener is for.
	if _, err := hc.Get(dev.Endpoints()[f] + "/v1/health"); err == nil {
		t.Fatal("the API port with --tls-verify-clients answered a client without a certificate")
	}

	for _, i := range []int{leader, f} {
		ep := consoles[i]
		// The console needs nothing; the API's description neither.
		if a := call(http.MethodGet, ep+"/ui/", "", nil, nil); a.status != http.StatusOK || !strings.Contains(a.body, "raftlock console") ||
			a.header.Get("Content-Security-Policy") == "" {
			t.Fatalf("GET %s/ui/ without a certificate: %d %.200s", ep, a.status, a.body)
		}
		if a := call(http.MethodGet, ep+"/v1/openapi.yaml", "", nil, nil); a.status != http.StatusOK {
			t.Fatalf("GET %s/v1/openapi.yaml: %d %.200s", ep, a.status, a.body)
		}
		// Every API call needs a token, those open on the API port included.
		for _, p := range []string{"/v1/sessions", "/v1/locks", "/v1/health", "/v1/ready", "/v1/cluster"} {
			a := call(http.MethodGet, ep+p, "", nil, nil)
			if a.status != http.StatusUnauthorized || !strings.Contains(a.body, api.CodeUnauthorized) {
				t.Fatalf("GET %s%s without a token: %d %s; want 401", ep, p, a.status, a.body)
			}
		}
		if a := call(http.MethodGet, ep+"/v1/sessions", "not-a-token", nil, nil); a.status != http.StatusUnauthorized {
			t.Fatalf("GET %s/v1/sessions with an unknown token: %d %s", ep, a.status, a.body)
		}
		// With a token, the API works as on the API port: a session and a lock, through the
		// follower too (forwarded to the leader over the members' mutual TLS).
		var s api.Session
		a := call(http.MethodPost, ep+"/v1/sessions", mgmt, api.CreateSessionRequest{TTL: "30s", Name: "console"}, nil)
		if a.status != http.StatusCreated {
			t.Fatalf("POST %s/v1/sessions with a token: %d %s", ep, a.status, a.body)
		}
		_ = json.Unmarshal([]byte(a.body), &s)
		if a := call(http.MethodPost, ep+"/v1/locks/console/a/acquire", mgmt, api.AcquireRequest{Session: s.ID}, nil); a.status != http.StatusOK {
			t.Fatalf("acquire through %s: %d %s", ep, a.status, a.body)
		}
		if a := call(http.MethodGet, ep+"/v1/health", mgmt, nil, nil); a.status != http.StatusOK {
			t.Fatalf("GET %s/v1/health with a token: %d %s", ep, a.status, a.body)
		}
		if a := call(http.MethodDelete, ep+"/v1/sessions/"+s.ID, mgmt, nil, nil); a.status != http.StatusOK {
			t.Fatalf("DELETE %s/v1/sessions/ID: %d %s", ep, a.status, a.body)
		}
		// A request marked as forwarded by a member loses the mark: a follower forwards it to
		// the leader as any client's (were the mark believed, the follower would answer that it
		// is not the leader).
		a = call(http.MethodPost, ep+"/v1/sessions", mgmt, api.CreateSessionRequest{TTL: "30s"},
			map[string]string{api.HeaderForwarded: "n9"})
		if a.status != http.StatusCreated {
			t.Fatalf("POST %s/v1/sessions marked as forwarded: %d %s; want it handled as a client's", ep, a.status, a.body)
		}

		// What is the members' is not served: their publication without a token, the bootstrap,
		// a member's view of itself, metrics and profiles.
		st, err := dev.Agent(leader).Node().Status()
		if err != nil {
			t.Fatal(err)
		}
		m := st.Members[0]
		pub := api.AddMemberRequest{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr}
		if a := call(http.MethodPost, ep+"/v1/cluster/members", "", pub, nil); a.status != http.StatusUnauthorized {
			t.Fatalf("a publication without a token through %s: %d %s; want 401", ep, a.status, a.body)
		}
		if a := call(http.MethodPost, ep+"/v1/acl/bootstrap", "", nil, nil); a.status != http.StatusForbidden {
			t.Fatalf("POST %s/v1/acl/bootstrap: %d %s; want 403", ep, a.status, a.body)
		}
		if a := call(http.MethodGet, ep+"/v1/health?member="+url.QueryEscape(m.ID), mgmt, nil, nil); a.status != http.StatusForbidden {
			t.Fatalf("GET %s/v1/health?member=: %d %s; want 403", ep, a.status, a.body)
		}
		for _, p := range []string{"/metrics", "/debug/pprof/", "/"} {
			if a := call(http.MethodGet, ep+p, mgmt, nil, nil); a.status != http.StatusNotFound || !strings.Contains(a.body, api.CodeNotFound) {
				t.Fatalf("GET %s%s: %d %.200s; want 404", ep, p, a.status, a.body)
			}
		}

		// Raft is not spoken there: a RequestVote's first bytes get an HTTP error.
		conn, err := tls.Dial("tcp", strings.TrimPrefix(ep, "https://"), noCert)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := conn.Write([]byte{1, 0x85, 0xa4, 'T', 'e', 'r', 'm', 0x07, '\r', '\n', '\r', '\n'}); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if !strings.HasPrefix(line, "HTTP/1.1 400") {
			t.Fatalf("a Raft request on %s was answered %q; want an HTTP 400", ep, line)
		}
	}
	// The API port's members' routes still work with a node certificate: the refusals above
	// are the console listener's.
	nodeCert, nodeKey := files.NodeFiles(dev.Agent(f).Node().ID())
	pair, err := tls.LoadX509KeyPair(nodeCert, nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	withNode := tlsConfig(t, files, false)
	withNode.Certificates = []tls.Certificate{pair}
	nc := httpsClient(withNode)
	defer nc.CloseIdleConnections()
	res, err := nc.Get(dev.Endpoints()[leader] + "/v1/health?member=" + dev.Agent(f).Node().ID())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/health?member= on the API port with a node certificate: %d", res.StatusCode)
	}
}

// --console-addr needs TLS and --acl: a listener that asks for no certificate must have a token
// to go by.
func TestConsoleAddrNeedsTLSAndACL(t *testing.T) {
	for _, c := range []struct {
		name string
		tune func(*config.Config)
	}{
		{"no TLS, no ACL", func(*config.Config) {}},
		{"ACL without TLS", func(c *config.Config) { c.ACL = true }},
		{"TLS without ACL", func(c *config.Config) { c.TLSCertFile, c.TLSKeyFile, c.TLSCAFile = "c.pem", "k.pem", "ca.pem" }},
	} {
		cfg := config.Default()
		cfg.ID, cfg.DataDir, cfg.ConsoleAddr = "n1", t.TempDir(), "127.0.0.1:0"
		c.tune(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "--console-addr needs") {
			t.Errorf("%s: Validate says %v", c.name, err)
		}
	}
}
