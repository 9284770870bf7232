package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/devtest"
)

// aclShared is one three-node cluster started with --acl (and --enable-pprof), bootstrapped on
// first use; aclRoot is its management token's secret.
var (
	aclShared = devtest.Shared{
		Options: func() agent.DevOptions {
			return devOptions(func(c *config.Config) { c.ACL, c.EnablePprof = true, true })
		},
		Settle: aclSettle,
	}
	aclRoot string
)

// aclSettle bootstraps the cluster's ACLs through its leader, then settles it with that token.
func aclSettle(d *agent.Dev) error {
	leader := ""
	for i, ep := range d.Endpoints() {
		if a := d.Agent(i); a != nil && a.Node().IsLeader() {
			leader = ep
		}
	}
	if leader == "" {
		return fmt.Errorf("acl settle: no leader")
	}
	r := rawDo(http.MethodPost, leader+"/v1/acl/bootstrap", nil, nil)
	if r.err != nil || r.status != http.StatusOK {
		return fmt.Errorf("acl settle: bootstrap: %v %d %s", r.err, r.status, short(r.body))
	}
	var b api.BootstrapResponse
	if err := json.Unmarshal(r.body, &b); err != nil || b.SecretID == "" {
		return fmt.Errorf("acl settle: bootstrap answered %s", r.body)
	}
	aclRoot = b.SecretID
	return settleWith(d, as(aclRoot))
}

// aclCluster returns the endpoints of the shared ACL cluster: the leader's first.
func aclCluster(t *testing.T) []string {
	t.Helper()
	d := aclShared.Get(t)
	leader, followers := roles(t, d)
	return append([]string{leader}, followers...)
}

// as returns the header that presents a token.
func as(secret string) http.Header { return http.Header{api.HeaderToken: {secret}} }

// bearer returns the header that presents a token as Authorization: Bearer.
func bearer(secret string) http.Header { return http.Header{"Authorization": {"Bearer " + secret}} }

// doAs sends a request with a token and fails the test if no answer came back.
func doAs(t *testing.T, secret, method, url string, body any) response {
	t.Helper()
	r := rawDo(method, url, body, as(secret))
	if r.err != nil {
		t.Fatalf("%s %s: %v", method, url, r.err)
	}
	return r
}

var aclSeq atomic.Uint64

// uniqueName returns a policy name (and lock prefix part) no other test uses.
func uniqueName(t *testing.T) string {
	n := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	if len(n) > 80 {
		n = n[:80]
	}
	return fmt.Sprintf("%s-%d", n, aclSeq.Add(1))
}

// newPolicy creates a policy through ep with the root token and returns its name.
func newPolicy(t *testing.T, ep, operator string, locks ...api.LockRule) string {
	t.Helper()
	name := uniqueName(t)
	var p api.Policy
	ok(t, doAs(t, aclRoot, http.MethodPost, ep+"/v1/acl/policies", api.Policy{Name: name, Locks: locks, Operator: operator}), http.StatusOK, &p)
	if p.Name != name {
		t.Fatalf("created policy %+v", p)
	}
	return name
}

// newToken creates a token with the policies through ep with the root token.
func newToken(t *testing.T, ep string, policies ...string) api.NewToken {
	t.Helper()
	var tok api.NewToken
	ok(t, doAs(t, aclRoot, http.MethodPost, ep+"/v1/acl/tokens", api.CreateTokenRequest{Description: t.Name(), Policies: policies}), http.StatusOK, &tok)
	if tok.SecretID == "" || tok.AccessorID == "" || tok.SecretID == tok.AccessorID {
		t.Fatalf("new token %+v", tok)
	}
	return tok
}

// rule is a lock rule of a policy body.
func rule(prefix, access string) api.LockRule { return api.LockRule{Prefix: prefix, Access: access} }

// sessionAs creates a session as the token and returns its id.
func sessionAs(t *testing.T, ep, secret string) string {
	t.Helper()
	var s api.Session
	ok(t, doAs(t, secret, http.MethodPost, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "30s"}), http.StatusCreated, &s)
	return s.ID
}

// refused checks a 401 or 403 answer and that its message names the wanted permission (for
// 403) without any secret.
func refused(t *testing.T, r response, status int, wantInMessage string, secrets ...string) {
	t.Helper()
	code := api.CodeForbidden
	if status == http.StatusUnauthorized {
		code = api.CodeUnauthorized
	}
	eb := apiError(t, r, status, code)
	if !strings.Contains(eb.Error.Message, wantInMessage) {
		t.Fatalf("message %q does not name %q", eb.Error.Message, wantInMessage)
	}
	for _, s := range append(secrets, aclRoot) {
		if s != "" && strings.Contains(string(r.body), s) {
			t.Fatalf("an error answer holds a secret: %s", r.body)
		}
	}
}
