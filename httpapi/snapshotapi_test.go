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
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/config"
)

// GET /v1/snapshot needs the management policy under ACL; the file it streams (here through
// a follower) is a whole, valid backup, whose checksum and records all check.
func TestSnapshotSaveNeedsManagement(t *testing.T) {
	eps := aclCluster(t)
	leader, follower := eps[0], eps[1]
	operator := newToken(t, leader, newPolicy(t, leader, "write", rule("", "write")))
	refused(t, doAs(t, operator.SecretID, http.MethodGet, follower+"/v1/snapshot", nil), http.StatusForbidden, "management", operator.SecretID)
	refused(t, rawDo(http.MethodGet, leader+"/v1/snapshot", nil, nil), http.StatusUnauthorized, "token")
	for _, q := range []string{"", "?consistency=stale"} {
		r := doAs(t, aclRoot, http.MethodGet, follower+"/v1/snapshot"+q, nil)
		if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/octet-stream" {
			t.Fatalf("GET /v1/snapshot%s: %d %s %s", q, r.status, r.header.Get("Content-Type"), short(r.body))
		}
		sum, err := backup.Inspect(bytes.NewReader(r.body))
		if err != nil {
			t.Fatalf("the saved file%s: %v", q, err)
		}
		if !sum.State.ACLBootstrapped || q == "" && sum.State.ACLTokens < 2 || sum.Header.Index == 0 {
			t.Fatalf("the saved file%s: %+v", q, sum)
		}
	}
}

// PUT /v1/snapshot restores a backup through any node, larger than the request body limit,
// needs the management policy, refuses a damaged file with 400, and both the save and the
// restore are audited by the node that received them. Other requests keep the body limit.
func TestSnapshotRestoreThroughAFollowerIsAuditedAndUnlimited(t *testing.T) {
	dir := t.TempDir()
	audit := func(id string) string { return filepath.Join(dir, id+".audit") }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, devOptions(func(c *config.Config) {
		c.ACL, c.MaxBodyBytes, c.AuditLog = true, 2048, audit(c.ID)
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	leader, followers := roles(t, d)
	r := rawDo(http.MethodPost, leader+"/v1/acl/bootstrap", nil, nil)
	var root api.BootstrapResponse
	ok(t, r, http.StatusOK, &root)
	if err := settleWith(d, as(root.SecretID)); err != nil {
		t.Fatal(err)
	}
	follower := followers[0]
	value := strings.Repeat("v", 1000)
	var s api.Session
	ok(t, doAs(t, root.SecretID, http.MethodPost, leader+"/v1/sessions", api.CreateSessionRequest{TTL: "1m"}), http.StatusCreated, &s)
	for i := range 5 {
		ok(t, doAs(t, root.SecretID, http.MethodPost, fmt.Sprintf("%s/v1/locks/big/%d/acquire", leader, i),
			api.AcquireRequest{Session: s.ID, Value: &value}), http.StatusOK, nil)
	}
	saved := doAs(t, root.SecretID, http.MethodGet, follower+"/v1/snapshot", nil)
	if saved.status != http.StatusOK || len(saved.body) <= 2048 {
		t.Fatalf("save: %d, %d bytes (want more than the body limit)", saved.status, len(saved.body))
	}
	// Taken after the save: the restore takes it away again.
	ok(t, doAs(t, root.SecretID, http.MethodPost, leader+"/v1/locks/later/acquire", api.AcquireRequest{Session: s.ID}), http.StatusOK, nil)

	var op api.NewToken
	ok(t, doAs(t, root.SecretID, http.MethodPost, leader+"/v1/acl/policies", api.Policy{Name: "op", Operator: "write", Locks: []api.LockRule{}}), http.StatusOK, nil)
	ok(t, doAs(t, root.SecretID, http.MethodPost, leader+"/v1/acl/tokens", api.CreateTokenRequest{Policies: []string{"op"}}), http.StatusOK, &op)
	refused(t, restoreAs(t, op.SecretID, follower, saved.body), http.StatusForbidden, "management")
	damaged := bytes.Clone(saved.body)
	damaged[len(damaged)/2] ^= 1
	apiError(t, restoreAs(t, root.SecretID, leader, damaged), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, doAs(t, root.SecretID, http.MethodPut, leader+"/v1/snapshot?index_gap=x", saved.body), http.StatusBadRequest, api.CodeInvalidArgument)

	// A blocking query waiting at the leader when the restore happens answers then.
	watch := make(chan response, 1)
	go func() {
		watch <- rawDoCtx(context.Background(), http.MethodGet, leader+"/v1/locks/big/3?index=999999999&wait=5m", nil, as(root.SecretID))
	}()
	eventually(t, "the blocking query to wait", func() string {
		if r := rawDo(http.MethodGet, leader+"/metrics", nil, nil); !strings.Contains(string(r.body), "\nraftlock_blocking_queries 1\n") {
			return "not waiting yet"
		}
		return ""
	})
	var res api.RestoreResponse
	ok(t, restoreAs(t, root.SecretID, follower, saved.body), http.StatusOK, &res)
	var watched api.Lock
	ok(t, await(t, watch, "the blocking query"), http.StatusOK, &watched)
	if watched.Held || watched.Name != "big/3" {
		t.Fatalf("the blocking query answered %+v; want the lock, not held (the restore ends every session)", watched)
	}
	sum, _ := backup.Inspect(bytes.NewReader(saved.body))
	if res.BackupIndex != sum.Header.Index || res.Locks != 6 || res.Sessions != 0 || res.Index <= sum.Header.Index+1_000_000_000-1 {
		t.Fatalf("restore answered %+v for a backup at %d", res, sum.Header.Index)
	}
	var l api.Lock
	ok(t, doAs(t, root.SecretID, http.MethodGet, follower+"/v1/locks/later", nil), http.StatusOK, &l)
	if l.Held {
		t.Fatalf("a lock taken after the save is held after the restore: %+v", l)
	}
	ok(t, doAs(t, root.SecretID, http.MethodGet, follower+"/v1/locks/big/3", nil), http.StatusOK, &l)
	if l.Held {
		t.Fatalf("restored lock %+v; want not held: the restore ends every session", l)
	}
	// The body limit still holds elsewhere.
	apiError(t, doAs(t, root.SecretID, http.MethodPost, leader+"/v1/sessions", `{"ttl":"10s","name":"`+strings.Repeat("x", 4096)+`"}`),
		http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)

	followerID := ""
	for i := range d.Size() {
		if d.Endpoints()[i] == follower {
			followerID = d.Agent(i).Node().ID()
		}
	}
	eventually(t, "the save and the restore in the follower's audit log", func() string {
		var seen []string
		for _, e := range auditLines(t, audit(followerID)) {
			if e.Path == "/v1/snapshot" {
				seen = append(seen, fmt.Sprintf("%s %d %t", e.Method, e.Status, e.AccessorID == root.AccessorID))
			}
		}
		want := "GET 200 true,PUT 403 false,PUT 200 true"
		if got := strings.Join(seen, ","); got != want {
			return fmt.Sprintf("audited %q, want %q", got, want)
		}
		return ""
	})
}

// auditLine is what the tests here read of an audit log line.
type auditLine struct {
	Method     string `json:"method"`
	Path       string `json:"path"`
	AccessorID string `json:"accessor_id"`
	Status     int    `json:"status"`
}

// auditLines reads the audit log at path; a missing file has none.
func auditLines(t *testing.T, path string) []auditLine {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []auditLine
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var e auditLine
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// The membership additions: promote answers 404 for an unknown member and 200 for a voter,
// a bad suffrage is refused, and the leader's GET /v1/cluster gives each member's applied
// index and lag.
func TestMembershipAdditions(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	apiError(t, do(t, http.MethodPost, followers[0]+"/v1/cluster/members/nope/promote", nil), http.StatusNotFound, api.CodeNotFound)
	var mr api.MembersResponse
	ok(t, do(t, http.MethodPost, leader+"/v1/cluster/members/"+d.Agent(0).Node().ID()+"/promote", nil), http.StatusOK, &mr)
	if len(mr.Members) != 3 || mr.Warning != "" {
		t.Fatalf("promote of a voter answered %+v", mr)
	}
	apiError(t, do(t, http.MethodPost, leader+"/v1/cluster/members",
		map[string]string{"id": "n9", "raft_addr": "127.0.0.1:1", "http_addr": "127.0.0.1:2", "suffrage": "observer"}),
		http.StatusBadRequest, api.CodeInvalidArgument)
	eventually(t, "every member's lag in GET /v1/cluster", func() string {
		var c api.Cluster
		if r := do(t, http.MethodGet, leader+"/v1/cluster", nil); r.status != http.StatusOK || json.Unmarshal(r.body, &c) != nil {
			return fmt.Sprintf("GET /v1/cluster: %d", r.status)
		}
		for _, m := range c.Members {
			if m.Lag == nil || m.AppliedIndex == nil || *m.AppliedIndex == 0 {
				return fmt.Sprintf("member %s: %+v", m.ID, m)
			}
		}
		return ""
	})
}

// restoreAs sends a backup file to PUT /v1/snapshot through ep with a token, as a file: an
// application/octet-stream body.
func restoreAs(t *testing.T, secret, ep string, backup []byte) response {
	t.Helper()
	return restoreQuery(t, secret, ep, "", backup)
}

// restoreQuery sends PUT /v1/snapshot with a query (e.g. "?acl=keep") and the backup file, as
// a token.
func restoreQuery(t *testing.T, secret, ep, query string, backup []byte) response {
	t.Helper()
	hdr := as(secret)
	hdr.Set("Content-Type", "application/octet-stream")
	r := rawDo(http.MethodPut, ep+"/v1/snapshot"+query, backup, hdr)
	if r.err != nil {
		t.Fatalf("PUT %s/v1/snapshot: %v", ep, r.err)
	}
	return r
}

// A backup of a cluster that never ran --acl, restored into one whose ACLs are bootstrapped,
// would un-bootstrap them: the next tokenless POST /v1/acl/bootstrap would get a management
// secret. It is refused with 400 and changes nothing, unless ?acl=keep (the cluster keeps its
// tokens, and bootstrap stays refused) or ?acl=replace (the backup's ACL state, none) says
// what to do; ?acl= takes nothing else.
func TestSnapshotRestoreWithoutACLStateNeedsAChoice(t *testing.T) {
	open := sharedCluster(t)
	saved := do(t, http.MethodGet, open.Endpoints()[0]+"/v1/snapshot", nil)
	if saved.status != http.StatusOK {
		t.Fatalf("save from the cluster without ACL: %d %s", saved.status, short(saved.body))
	}
	if sum, err := backup.Inspect(bytes.NewReader(saved.body)); err != nil || sum.State.ACLBootstrapped {
		t.Fatalf("the backup: %+v, %v; want one without ACL state", sum.State, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, devOptions(func(c *config.Config) { c.ACL = true }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	leader, followers := roles(t, d)
	var root api.BootstrapResponse
	ok(t, rawDo(http.MethodPost, leader+"/v1/acl/bootstrap", nil, nil), http.StatusOK, &root)
	if err := settleWith(d, as(root.SecretID)); err != nil {
		t.Fatal(err)
	}
	r := restoreAs(t, root.SecretID, followers[0], saved.body)
	apiError(t, r, http.StatusBadRequest, api.CodeInvalidArgument)
	if !strings.Contains(string(r.body), "acl=keep") {
		t.Fatalf("the refusal does not say how to go on: %s", r.body)
	}
	apiError(t, restoreQuery(t, root.SecretID, leader, "?acl=drop", saved.body), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, rawDo(http.MethodPost, followers[0]+"/v1/acl/bootstrap", nil, nil), http.StatusForbidden, api.CodeForbidden)

	var res api.RestoreResponse
	ok(t, restoreQuery(t, root.SecretID, followers[0], "?acl=keep", saved.body), http.StatusOK, &res)
	if res.ACLTokens == 0 {
		t.Fatalf("restore with acl=keep answered %+v; want the cluster's tokens", res)
	}
	if err := settleWith(d, as(root.SecretID)); err != nil {
		t.Fatal(err)
	}
	apiError(t, rawDo(http.MethodPost, followers[0]+"/v1/acl/bootstrap", nil, nil), http.StatusForbidden, api.CodeForbidden)
	ok(t, doAs(t, root.SecretID, http.MethodGet, followers[0]+"/v1/acl/tokens", nil), http.StatusOK, nil)

	ok(t, restoreQuery(t, root.SecretID, leader, "?acl=replace", saved.body), http.StatusOK, &res)
	if res.ACLTokens != 0 {
		t.Fatalf("restore with acl=replace answered %+v; want the backup's ACL state, none", res)
	}
}
