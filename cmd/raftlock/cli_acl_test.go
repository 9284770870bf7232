package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/config"
)

// runWithEnv runs the binary to the end against endpoints, with extra environment variables.
func runWithEnv(t *testing.T, endpoints []string, env []string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliEnv.bin, args...)
	cmd.Env = append(append(os.Environ(), endpointsEnv+"="+strings.Join(endpoints, ","), tokenEnv+"="), env...)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return finish(t, cmd, &stdout, &stderr, 30*time.Second)
}

// The acl commands against a cluster started with --acl: bootstrap once, policies and tokens
// made and removed, and --token (or $RAFTLOCK_TOKEN) on the other client commands.
func TestACLCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, agent.DevOptions{Tune: func(c *config.Config) { c.ACL = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	eps := d.Endpoints()
	run := func(env []string, args ...string) cliResult {
		t.Helper()
		return runWithEnv(t, eps, env, args...)
	}
	must := func(env []string, args ...string) string {
		t.Helper()
		r := run(env, args...)
		if r.code != 0 {
			t.Fatalf("raftlock %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}

	if r := run(nil, "locks"); r.code != exitFailure || !strings.Contains(r.stderr, "token") {
		t.Fatalf("locks without a token: exit %d, stderr %q", r.code, r.stderr)
	}
	var boot api.BootstrapResponse
	if err := json.Unmarshal([]byte(must(nil, "acl", "bootstrap", "-o", "json")), &boot); err != nil || boot.SecretID == "" {
		t.Fatalf("bootstrap: %+v %v", boot, err)
	}
	if r := run(nil, "acl", "bootstrap"); r.code != exitFailure || !strings.Contains(r.stderr, "already bootstrapped") {
		t.Fatalf("second bootstrap: exit %d, stderr %q", r.code, r.stderr)
	}
	root := []string{tokenEnv + "=" + boot.SecretID}

	out := must(root, "acl", "policy", "create", "jobs-writer", "--lock", "jobs/=write", "--lock", "=read", "--operator", "read")
	if !strings.Contains(out, "jobs-writer") || !strings.Contains(out, `"jobs/"=write`) {
		t.Fatalf("policy create:\n%s", out)
	}
	if r := run(root, "acl", "policy", "create", "bad", "--lock", "jobs/"); r.code != exitFailure {
		t.Fatalf("a --lock without ACCESS: exit %d", r.code)
	}
	var p api.Policy
	if err := json.Unmarshal([]byte(must(root, "acl", "policy", "get", "jobs-writer", "-o", "json")), &p); err != nil || len(p.Locks) != 2 || p.Operator != "read" {
		t.Fatalf("policy get: %+v %v", p, err)
	}
	if out := must(root, "acl", "policy", "list"); !strings.Contains(out, "management") || !strings.Contains(out, "jobs-writer") {
		t.Fatalf("policy list:\n%s", out)
	}

	var tok api.NewToken
	if err := json.Unmarshal([]byte(must(root, "acl", "token", "create", "--policy", "jobs-writer", "--description", "nightly", "-o", "json")), &tok); err != nil || tok.SecretID == "" {
		t.Fatalf("token create: %+v %v", tok, err)
	}
	if out := must(root, "acl", "token", "list"); !strings.Contains(out, tok.AccessorID) || strings.Contains(out, tok.SecretID) || strings.Contains(out, boot.SecretID) {
		t.Fatalf("token list (no secrets):\n%s", out)
	}
	if out := must(root, "acl", "token", "get", tok.AccessorID); !strings.Contains(out, "nightly") || strings.Contains(out, tok.SecretID) {
		t.Fatalf("token get:\n%s", out)
	}
	if out := must(nil, "acl", "token", "get", "self", "--token", tok.SecretID); !strings.Contains(out, tok.AccessorID) {
		t.Fatalf("token get self:\n%s", out)
	}

	// The new token through --token and through the environment: it may write jobs/, and
	// only read elsewhere.
	must(nil, "lock", "--token", tok.SecretID, "jobs/cli", "--", "true") // flags before the name: the rest is the command's
	must([]string{tokenEnv + "=" + tok.SecretID}, "lock", "jobs/cli", "--", "true")
	// Inside, RAFTLOCK_TOKEN stays the ACL token given by --token, so that a raftlock command
	// run by COMMAND acts with it; the fencing token has its own name.
	inner := must([]string{"RAFTLOCK_TEST_EXE=" + cliEnv.bin}, "lock", "--token", tok.SecretID, "jobs/cli", "--", "sh", "-c",
		`echo "fencing=$RAFTLOCK_FENCING_TOKEN acl=$RAFTLOCK_TOKEN"; "$RAFTLOCK_TEST_EXE" lock-info -o json "$RAFTLOCK_LOCK"`)
	if !strings.Contains(inner, "acl="+tok.SecretID) || strings.Contains(inner, "fencing= ") || !strings.Contains(inner, `"token"`) {
		t.Fatalf("a lock's command under ACLs saw:\n%s", inner)
	}
	if r := run(nil, "lock", "--token", tok.SecretID, "db/cli", "--", "true"); r.code != exitFailure || !strings.Contains(r.stderr, "write access") {
		t.Fatalf("lock outside the policy: exit %d, stderr %q", r.code, r.stderr)
	}
	must(nil, "locks", "--token", tok.SecretID)
	must(nil, "members", "--token", tok.SecretID) // operator: read
	if r := run(nil, "acl", "token", "list", "--token", tok.SecretID); r.code != exitFailure || !strings.Contains(r.stderr, "management") {
		t.Fatalf("token list without management: exit %d, stderr %q", r.code, r.stderr)
	}

	must(root, "acl", "token", "delete", tok.AccessorID)
	if r := run(nil, "locks", "--token", tok.SecretID); r.code != exitFailure || !strings.Contains(r.stderr, "unknown") {
		t.Fatalf("a deleted token: exit %d, stderr %q", r.code, r.stderr)
	}
	must(root, "acl", "policy", "delete", "jobs-writer")
	if r := run(root, "acl", "policy", "get", "jobs-writer"); r.code != exitFailure {
		t.Fatalf("get of a deleted policy: exit %d", r.code)
	}
}

// Under --acl, `sessions` with a token without operator:read lists only the token's own
// sessions, and says so on stderr rather than let an empty table read as "no sessions"; with
// operator:read it lists every session and says nothing.
func TestSessionsSaysWhenItListsOnlyTheTokensOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, agent.DevOptions{Tune: func(c *config.Config) { c.ACL = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	run := func(env []string, args ...string) cliResult {
		t.Helper()
		r := runWithEnv(t, d.Endpoints(), env, args...)
		if r.code != 0 {
			t.Fatalf("raftlock %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	var boot api.BootstrapResponse
	if err := json.Unmarshal([]byte(run(nil, "acl", "bootstrap", "-o", "json").stdout), &boot); err != nil {
		t.Fatal(err)
	}
	root := []string{tokenEnv + "=" + boot.SecretID}
	run(root, "acl", "policy", "create", "jobs-only", "--lock", "jobs/=write")
	var tok api.NewToken
	if err := json.Unmarshal([]byte(run(root, "acl", "token", "create", "--policy", "jobs-only", "-o", "json").stdout), &tok); err != nil {
		t.Fatal(err)
	}
	// A session of the root token, which the other token may not see.
	c, err := client.New(d.Endpoints(), client.WithToken(boot.SecretID))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if err := client.NewMutex(s, "jobs/held").Lock(ctx); err != nil {
		t.Fatal(err)
	}
	own := run([]string{tokenEnv + "=" + tok.SecretID}, "sessions")
	if !strings.Contains(own.stderr, "operator:read") || strings.Contains(own.stdout, "jobs/held") {
		t.Fatalf("sessions without operator:read: stdout %q, stderr %q", own.stdout, own.stderr)
	}
	all := run(root, "sessions")
	if all.stderr != "" || !strings.Contains(all.stdout, "jobs/held") {
		t.Fatalf("sessions with the management token: stdout %q, stderr %q", all.stdout, all.stderr)
	}
}
