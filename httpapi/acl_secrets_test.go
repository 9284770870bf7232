package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a cluster's loggers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// ownACLCluster starts a cluster with --acl for one test, in dir, logging everything at trace
// level into logs, bootstraps it and returns it with the management token's secret.
func ownACLCluster(t *testing.T, dir string, logs *syncBuffer, tune func(*config.Config)) (*agent.Dev, string) {
	t.Helper()
	opts := devOptions(func(c *config.Config) {
		c.ACL = true
		if tune != nil {
			tune(c)
		}
	})
	opts.DataDir = dir
	opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: logs})
	ctx, cancel := context.WithTimeout(context.Background(), 30*deadline)
	defer cancel()
	d, err := agent.StartDev(ctx, opts)
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	_, followers := roles(t, d)
	// Before the bootstrap no token exists: every guarded request is refused.
	refused(t, rawDo(http.MethodPost, followers[0]+"/v1/sessions", api.CreateSessionRequest{TTL: "10s"}, nil), http.StatusUnauthorized, "token")
	var b api.BootstrapResponse
	r := rawDo(http.MethodPost, followers[0]+"/v1/acl/bootstrap", nil, nil)
	ok(t, r, http.StatusOK, &b)
	hasKeys(t, fields(t, r.body), "accessor_id", "secret_id", "policies")
	if b.AccessorID == "" || b.SecretID == "" || strings.Join(b.Policies, ",") != api.ManagementPolicy {
		t.Fatalf("bootstrap %+v", b)
	}
	// (Not to the leader: with a rate limit, the followers' publications spent 127.0.0.1's burst there.)
	apiError(t, rawDo(http.MethodPost, followers[1]+"/v1/acl/bootstrap", nil, nil), http.StatusForbidden, api.CodeForbidden)
	if err := settleWith(d, as(b.SecretID)); err != nil {
		t.Fatal(err)
	}
	return d, b.SecretID
}

// No secret reaches a data directory (log, stable store, snapshots), an audit log or a log
// line, whatever requests carried it: tokens created, used through followers, refused, sent in
// either header, deleted.
func TestACLSecretsNeverReachDiskOrLogs(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	d, root := ownACLCluster(t, dir, &logs, func(c *config.Config) {
		c.AuditLog = filepath.Join(dir, c.ID+".audit")
		c.LogLevel = "trace"
	})
	leader, followers := roles(t, d)
	eps := append([]string{leader}, followers...)
	secrets := []string{root}
	var tok api.NewToken
	var p api.Policy
	ok(t, doAs(t, root, http.MethodPost, followers[0]+"/v1/acl/policies", api.Policy{Name: "w", Locks: []api.LockRule{rule("s/", api.AccessWrite)}}), http.StatusOK, &p)
	ok(t, doAs(t, root, http.MethodPost, followers[1]+"/v1/acl/tokens", api.CreateTokenRequest{Description: "d", Policies: []string{"w"}}), http.StatusOK, &tok)
	secrets = append(secrets, tok.SecretID)
	for i, ep := range eps {
		s := sessionAs(t, ep, tok.SecretID)
		name := fmt.Sprintf("s/%d", i)
		ok(t, rawDo(http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s, "", strp("v")), bearer(tok.SecretID)), http.StatusOK, nil)
		ok(t, doAs(t, tok.SecretID, http.MethodGet, ep+"/v1/locks/"+name+"?consistency=stale", nil), http.StatusOK, nil)
		refused(t, doAs(t, tok.SecretID, http.MethodGet, ep+"/v1/cluster", nil), http.StatusForbidden, "operator:read", tok.SecretID)
		wrong := fmt.Sprintf("wrong-secret-%d-%s", i, tok.SecretID[:8])
		secrets = append(secrets, wrong)
		refused(t, doAs(t, wrong, http.MethodPost, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "10s"}), http.StatusUnauthorized, "unknown", wrong)
		refused(t, rawDo(http.MethodGet, ep+"/v1/locks/"+name, nil, bearer(wrong)), http.StatusUnauthorized, "unknown", wrong)
	}
	ok(t, doAs(t, root, http.MethodDelete, followers[0]+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusOK, nil)
	refused(t, doAs(t, tok.SecretID, http.MethodPost, followers[1]+"/v1/sessions", api.CreateSessionRequest{TTL: "10s"}), http.StatusUnauthorized, "unknown", tok.SecretID)

	for i := range d.Size() {
		if err := d.Agent(i).Node().Raft().Snapshot().Error(); err != nil && !strings.Contains(err.Error(), "nothing new") {
			t.Fatalf("snapshot of node %d: %v", i, err)
		}
	}
	d.Close() // every file written and closed

	files := 0
	err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s holds a secret (%s...)", path, s[:8])
			}
		}
		if strings.HasSuffix(path, ".audit") && !bytes.Contains(b, []byte(`"accessor_id":"`+tok.AccessorID+`"`)) {
			t.Errorf("%s names no request by the token's accessor id", path)
		}
		return nil
	})
	if err != nil || files < 6 {
		t.Fatalf("walking %s: %v (%d files)", dir, err, files)
	}
	out := logs.Bytes()
	if len(out) == 0 || !bytes.Contains(out, []byte("leading")) {
		t.Fatalf("the logs were not captured (%d bytes)", len(out))
	}
	for _, s := range secrets {
		if bytes.Contains(out, []byte(s)) {
			t.Errorf("the logs hold a secret (%s...)", s[:8])
		}
	}
}

// Under --acl the rate limit counts per token, wherever its requests come from, and one token
// may own at most --max-sessions-per-token sessions; beyond either, 429 with Retry-After and
// nothing applied.
func TestACLLimitsCountPerToken(t *testing.T) {
	var logs syncBuffer
	d, root := ownACLCluster(t, t.TempDir(), &logs, func(c *config.Config) {
		c.RateLimit = 1 // burst 2
		c.MaxSessionsPerToken = 2
	})
	leader, followers := roles(t, d)
	tokens := make([]api.NewToken, 2)
	for i := range tokens {
		var tok api.NewToken
		// Management requests are rate limited too: one node each, within the burst.
		ok(t, doAs(t, root, http.MethodPost, []string{leader, followers[0]}[i]+"/v1/acl/tokens", api.CreateTokenRequest{}), http.StatusOK, &tok)
		tokens[i] = tok
	}
	ep := followers[1]
	a, b := tokens[0].SecretID, tokens[1].SecretID
	sessionAs(t, ep, a)
	sessionAs(t, ep, a) // the burst of a, and its session limit
	for _, r := range []response{
		doAs(t, a, http.MethodPost, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "10s"}),
	} {
		apiError(t, r, http.StatusTooManyRequests, api.CodeTooManyRequests)
		if r.header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	// b, from the same address, has its own budget; a's third session is refused on another
	// node, which counts only its own requests, by the session limit.
	sessionAs(t, ep, b)
	r := doAs(t, a, http.MethodPost, leader+"/v1/sessions", api.CreateSessionRequest{TTL: "10s"})
	if eb := apiError(t, r, http.StatusTooManyRequests, api.CodeTooManyRequests); !strings.Contains(eb.Error.Message, "per token") {
		t.Fatalf("third session of a token: %q", eb.Error.Message)
	}
	var l api.SessionList
	ok(t, doAs(t, a, http.MethodGet, leader+"/v1/sessions", nil), http.StatusOK, &l)
	if len(l.Sessions) != 2 {
		t.Fatalf("token a owns %d sessions, want 2: nothing applied for the refused ones", len(l.Sessions))
	}
}

// FuzzACLRequests sends requests with arbitrary auth headers and ACL bodies to the --acl
// cluster: the answer is a success or an error of the API's table with its JSON body, never a
// 500 or a panic, and never holds a secret it was not created with. "{R}" stands for the
// management token's secret, so that the fuzzer gets past 401 into the policy and token
// bodies. `go test -run - -fuzz FuzzACLRequests -fuzztime 60s ./httpapi` explores.
func FuzzACLRequests(f *testing.F) {
	for _, s := range []struct {
		node         uint8
		header, auth string
		path, body   string
	}{
		{1, "{R}", "", "/v1/acl/policies", `{"name":"fz","locks":[{"prefix":"a/","access":"write"}],"operator":"read"}`},
		{1, "", "Bearer {R}", "/v1/acl/policies", `{"name":"fz2","locks":[{"prefix":"","access":"deny"},{"prefix":"","access":"read"}]}`},
		{2, "{R}", "", "/v1/acl/policies/fz", `{"name":"fz","locks":null,"operator":""}`},
		{3, "{R}", "", "/v1/acl/policies/management", `{}`},
		{1, "{R}", "", "/v1/acl/tokens", `{"description":"\u0000\ud800","policies":["fz","fz"]}`},
		{1, "{R}", "", "/v1/acl/tokens", `{"policies":["fz"]}`},
		{1, "", "Basic {R}", "/v1/acl/tokens", `{"policies":[]}`},
		{1, "", "Bearer", "/v1/sessions", `{"ttl":"10s"}`},
		{1, "x\x00y", "", "/v1/sessions", `{"ttl":"10s"}`},
		{1, "{R}{R}", "Bearer {R}", "/v1/sessions", `{"ttl":"10s"}`},
		{0, "{R}", "", "/v1/acl/tokens/%2e%2e", ``},
		{0, "{R}", "", "/v1/acl/token/self", ``},
		{1, "", "", "/v1/acl/bootstrap", `{"x":1}`},
		{1, "{R}", "", "/v1/acl/policies", `{"name":"fz3","locks":[` + strings.Repeat(`{"prefix":"p","access":"read"},`, 3) + `{}]}`},
	} {
		f.Add(s.node, s.header, s.auth, s.path, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, node uint8, header, auth, path string, body []byte) {
		eps := aclShared.Get(t).Endpoints()
		fill := func(s string) string { return strings.ReplaceAll(s, "{R}", aclRoot) }
		method := fuzzMethods[int(node)%len(fuzzMethods)]
		url := eps[int(node)/len(fuzzMethods)%len(eps)] + "/" + requestTarget(strings.TrimPrefix(path, "/"))
		hdr := http.Header{}
		if header != "" {
			hdr.Set(api.HeaderToken, fill(header))
		}
		if auth != "" {
			hdr.Set("Authorization", fill(auth))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*deadline)
		defer cancel()
		r := rawDoCtx(ctx, method, url, []byte(fill(string(body))), hdr)
		if r.err != nil {
			if r.status == 0 && (strings.Contains(r.err.Error(), "invalid") || strings.Contains(r.err.Error(), "malformed")) {
				return // the client refused to send it (a header or URL net/http cannot write)
			}
			t.Fatalf("%s %s: no answer: %v", method, url, r.err)
		}
		if strings.Contains(string(r.body), aclRoot) {
			t.Fatalf("%s %s: the answer holds the management secret: %s", method, url, short(r.body))
		}
		if r.status < 400 {
			if r.status >= 300 || r.status < 200 {
				t.Fatalf("%s %s: status %d", method, url, r.status)
			}
			return
		}
		if method == http.MethodHead {
			return
		}
		var eb api.ErrorBody
		if err := json.Unmarshal(r.body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Fatalf("%s %s: status %d without the error body (%v): %s", method, url, r.status, err, short(r.body))
		}
		if want, known := codeStatus[eb.Error.Code]; !known || want != r.status {
			t.Fatalf("%s %s: status %d with code %q: %s", method, url, r.status, eb.Error.Code, short(r.body))
		}
		if r.status >= 500 && eb.Error.Code != api.CodeNoLeader && eb.Error.Code != api.CodeTimeout {
			t.Fatalf("%s %s: %d: %s", method, url, r.status, short(r.body))
		}
	})
}
