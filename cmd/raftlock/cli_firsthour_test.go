package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/testkit"
)

// --version prints what the version command prints, as most tools' --version does.
func TestVersionFlag(t *testing.T) {
	flag, cmd := runCLI(t, "--version"), runCLI(t, "version")
	if flag.code != 0 || cmd.code != 0 || flag.stdout != cmd.stdout || !strings.HasPrefix(flag.stdout, "raftlock ") {
		t.Fatalf("--version: exit %d %q %s; version: exit %d %q", flag.code, flag.stdout, flag.stderr, cmd.code, cmd.stdout)
	}
}

// deadEndpoint returns an http endpoint on 127.0.0.1 where nothing listens.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// gaveUpAfter is how long a run said it kept trying, from the client's "gave up after N
// attempts in D".
var gaveUpAfter = regexp.MustCompile(`gave up after [0-9]+ attempts in ([0-9.]+[a-zµ]+)`)

// Against a cluster that does not answer, lock gives up when the inspection commands do (their
// 5 s retry timeout), not after the 15 s its own requests keep to ride out an election; its
// message says what failed.
func TestLockGivesUpOnADeadClusterWhenTheOtherCommandsDo(t *testing.T) {
	dead := deadEndpoint(t)
	for _, args := range [][]string{
		{"locks", "--endpoints", dead},
		{"lock", "--endpoints", dead, testLock(t), "--", "true"},
	} {
		r := runCLI(t, args...)
		m := gaveUpAfter.FindStringSubmatch(r.stderr)
		if r.code != exitFailure || m == nil {
			t.Fatalf("raftlock %s: exit %d, stderr %q; want exit 1 saying it gave up", strings.Join(args, " "), r.code, r.stderr)
		}
		took, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		// The retry loop stops at the first attempt past its timeout: 5 s and one backoff.
		if took >= client.DefaultRetryTimeout {
			t.Fatalf("raftlock %s kept trying for %s, the long retry timeout: %s", args[0], took, r.stderr)
		}
		if args[0] == "lock" && !strings.Contains(r.stderr, "reaching the cluster") {
			t.Fatalf("lock's message does not say what failed: %s", r.stderr)
		}
	}
}

// RAFTLOCK_TOKEN names the ACL token; without one, lock still puts the fencing token there
// for the commands of old (deprecated), but a raftlock that COMMAND runs does not take it for
// an ACL token: its own child sees its own fencing token there, not the outer run's.
func TestNestedLockDoesNotTakeTheFencingTokenForAnACLToken(t *testing.T) {
	outer, inner := testLock(t)+"/outer", testLock(t)+"/inner"
	r := runCLI(t, "lock", outer, "--", "sh", "-c",
		`echo "$RAFTLOCK_FENCING_TOKEN"; "$0" lock "$1" -- sh -c 'echo "$RAFTLOCK_FENCING_TOKEN $RAFTLOCK_TOKEN"'`, cliEnv.bin, inner)
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) != 3 {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if f[1] == f[0] || f[2] != f[1] {
		t.Fatalf("outer fencing token %s; the inner command saw RAFTLOCK_FENCING_TOKEN %s and RAFTLOCK_TOKEN %s, want its own fencing token in both", f[0], f[1], f[2])
	}
}

// freeBase returns a port N such that N to N+2 and N+100 to N+102 are free on 127.0.0.1 now.
func freeBase(t *testing.T) int {
	t.Helper()
	for base := 21000 + os.Getpid()%5000; base < 40000; base += 7 {
		ok := true
		var lns []net.Listener
		for _, p := range []int{base, base + 1, base + 2, base + 100, base + 101, base + 102} {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				ok = false
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports for a dev cluster")
	return 0
}

// `raftlock dev --port-base N` runs a second dev cluster on other ports, and its banner points
// the CLI at it; a dev cluster on ports in use fails with the hint.
func TestDevPortBaseRunsASecondCluster(t *testing.T) {
	base := freeBase(t)
	dev, out, errOut := startCLI(t, "dev", "--port-base", fmt.Sprint(base))
	want := fmt.Sprintf("http://127.0.0.1:%d,http://127.0.0.1:%d,http://127.0.0.1:%d", base, base+1, base+2)
	testkit.Eventually(t, 30*time.Second, "the dev cluster's banner", func() bool {
		return strings.Contains(out.String(), "Press Ctrl-C")
	})
	if !strings.Contains(out.String(), "export "+endpointsEnv+"="+want) {
		t.Fatalf("the banner does not point the CLI at the cluster:\n%s", out)
	}
	status := runWithEnv(t, strings.Split(want, ","), nil, "status")
	if status.code != 0 || !strings.Contains(status.stdout, "leader") {
		t.Fatalf("status against the second cluster: exit %d\n%s%s", status.code, status.stdout, status.stderr)
	}
	again := runCLI(t, "dev", "--port-base", fmt.Sprint(base))
	if again.code == 0 || !strings.Contains(again.stderr, "--port-base") {
		t.Fatalf("a dev cluster on ports in use: exit %d, stderr %q", again.code, again.stderr)
	}
	if err := dev.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, dev, out, errOut, 30*time.Second); r.code != 0 {
		t.Fatalf("dev after Ctrl-C: exit %d, stderr %s", r.code, r.stderr)
	}
}

// Against a cluster that serves HTTPS and requires client certificates, the TLS mistakes that
// no retry mends fail at once with a hint (no CA, then no client certificate), and plain HTTP
// to the HTTPS port, which the node closes unanswered (docs/security.md), is told to use https.
func TestTLSMistakesFailAtOnceWithAHint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, Tune: func(c *config.Config) { c.TLSVerifyClients = true }})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	files, _ := d.TLSFiles()
	noTLS := []string{caFileEnv + "=", certFileEnv + "=", keyFileEnv + "="}
	for _, c := range []struct {
		what string
		env  []string
		want string
	}{
		{"no CA", noTLS, "--ca-file"},
		{"no client certificate", []string{caFileEnv + "=" + files.CAFile, certFileEnv + "=", keyFileEnv + "="}, "--cert-file"},
	} {
		r := runWithEnv(t, d.Endpoints(), c.env, "locks")
		if r.code != exitFailure || !strings.Contains(r.stderr, "hint: ") || !strings.Contains(r.stderr, c.want) {
			t.Fatalf("%s: exit %d, stderr %q; want exit 1 and a hint naming %s", c.what, r.code, r.stderr, c.want)
		}
		t.Logf("%s: %s", c.what, r.stderr)
		if strings.Contains(r.stderr, "gave up after") {
			t.Fatalf("%s: the command kept trying a TLS error no retry mends: %s", c.what, r.stderr)
		}
	}
	plain := strings.Replace(d.Endpoints()[0], "https://", "http://", 1)
	r := runWithEnv(t, []string{plain}, noTLS, "locks")
	t.Logf("plain HTTP: %s", r.stderr)
	if r.code != exitFailure || !strings.Contains(r.stderr, "serves HTTPS") || !strings.Contains(r.stderr, "use "+d.Endpoints()[0]) {
		t.Fatalf("plain HTTP to the HTTPS port: exit %d, stderr %q; want it told to use %s", r.code, r.stderr, d.Endpoints()[0])
	}
	// The cluster with the right files works, of course.
	ok := runWithEnv(t, d.Endpoints(), []string{caFileEnv + "=" + files.CAFile, certFileEnv + "=" + files.ClientCertFile, keyFileEnv + "=" + files.ClientKeyFile}, "locks")
	if ok.code != 0 {
		t.Fatalf("with the cluster's CA and a client certificate: exit %d, %s", ok.code, ok.stderr)
	}
}
