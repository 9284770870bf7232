package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
)

func TestLockRunsCommandWithLockEnvironment(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	r := runCLI(t, "lock", name, "--", "sh", "-c", `echo "$RAFTLOCK_LOCK $RAFTLOCK_FENCING_TOKEN $RAFTLOCK_SESSION $RAFTLOCK_TOKEN"`)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	f := strings.Fields(r.stdout)
	if len(f) != 4 || f[0] != name {
		t.Fatalf("child saw %q", r.stdout)
	}
	if tok, err := strconv.ParseUint(f[1], 10, 64); err != nil || tok == 0 {
		t.Fatalf("RAFTLOCK_FENCING_TOKEN %q", f[1])
	}
	if f[3] != f[1] { // no ACL token in use: the old name still carries the fencing token
		t.Fatalf("RAFTLOCK_TOKEN %q, fencing token %q", f[3], f[1])
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(f[2]) {
		t.Fatalf("RAFTLOCK_SESSION %q", f[2])
	}
	if !lockIsFree(t, c, name) {
		t.Fatal("lock still held after the command exited")
	}
}

func TestConcurrentLockRunsNeverInterleave(t *testing.T) {
	runConcurrentLocks(t, nil)
}

// The acceptance scenario: cron-style runs on "three terminals" while the leader crashes.
func TestConcurrentLockRunsSurviveLeaderCrash(t *testing.T) {
	dev := cliEnv.dev
	runConcurrentLocks(t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		leader, err := dev.WaitLeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Kill(leader); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := dev.Restart(ctx, leader); err != nil {
				t.Errorf("restarting node %d: %v", leader, err)
				return
			}
			// Leave the shared cluster whole for the tests that follow.
			c := testClient(t)
			ep := dev.Endpoints()[leader]
			testkit.Eventually(t, 15*time.Second, "the restarted node to be ready", func() bool {
				return c.Raw().Ready(ctx, ep) == nil
			})
		})
	})
}

// runConcurrentLocks starts three `raftlock lock --wait` runs of a script that appends five
// lines tagged with its token, pausing between lines so that runs that were not excluded
// would interleave. Once the first run is inside, it calls during (if not nil).
func runConcurrentLocks(t *testing.T, during func()) {
	name := testLock(t)
	out := filepath.Join(t.TempDir(), "out")
	script := `for i in 1 2 3 4 5; do echo "$RAFTLOCK_FENCING_TOKEN $i" >> "$OUT"; sleep 0.05; done`
	t.Setenv("OUT", out)
	const runs = 3
	var all []func() cliResult
	for i := 0; i < runs; i++ {
		cmd, stdout, stderr := startCLI(t, "lock", "--wait", "30s", "--ttl", "5s", name, "--", "sh", "-c", script)
		all = append(all, func() cliResult { return finish(t, cmd, stdout, stderr, 30*time.Second) })
	}
	if during != nil {
		testkit.Eventually(t, 15*time.Second, "the first run to start", func() bool {
			data, err := os.ReadFile(out)
			return err == nil && len(data) > 0
		})
		during()
	}
	for _, f := range all {
		if r := f(); r.code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 5*runs {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), 5*runs, data)
	}
	var prevToken uint64
	for b := 0; b < runs; b++ {
		block := lines[5*b : 5*b+5]
		token := strings.Fields(block[0])[0]
		for i, l := range block {
			if l != token+" "+strconv.Itoa(i+1) {
				t.Fatalf("runs interleaved:\n%s", data)
			}
		}
		tok, _ := strconv.ParseUint(token, 10, 64)
		if tok <= prevToken {
			t.Fatalf("tokens not increasing:\n%s", data)
		}
		prevToken = tok
	}
}

func TestLockHeldExitsWithTempFail(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	m := holdLock(t, c, name)
	r := runCLI(t, "lock", name, "--", "sh", "-c", "echo ran")
	if r.code != exitLockHeld || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q, want %d and no run", r.code, r.stdout, exitLockHeld)
	}
	if !strings.Contains(r.stderr, m.Session().ID()) || !strings.Contains(r.stderr, strconv.FormatUint(m.Token(), 10)) {
		t.Fatalf("message does not name the holder: %s", r.stderr)
	}
	r = runCLI(t, "lock", "--wait", "300ms", name, "--", "sh", "-c", "echo ran")
	if r.code != exitLockHeld || r.stdout != "" || !strings.Contains(r.stderr, "still held") {
		t.Fatalf("--wait elapsed: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.GetLock(ctx, name)
	if err != nil || l.Session != m.Session().ID() || l.Waiters != 0 {
		t.Fatalf("after the failed runs: %+v, %v", l, err)
	}
}

func TestLockPassesExitCodesThrough(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	if r := runCLI(t, "lock", name, "--", "sh", "-c", "exit 7"); r.code != 7 {
		t.Fatalf("exit %d, want 7; stderr:\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, "lock", name, "--", "sh", "-c", "kill -USR1 $$"); r.code != 128+int(syscall.SIGUSR1) {
		t.Fatalf("killed by SIGUSR1: exit %d, want %d", r.code, 128+int(syscall.SIGUSR1))
	}
	if r := runCLI(t, "lock", name, "--", "/nonexistent/raftlock-test-cmd"); r.code != exitNotFound {
		t.Fatalf("missing command: exit %d, want %d; stderr:\n%s", r.code, exitNotFound, r.stderr)
	}
	if r := runCLI(t, "lock", name); r.code != exitFailure {
		t.Fatalf("no command: exit %d, want %d", r.code, exitFailure)
	}
	if !lockIsFree(t, c, name) {
		t.Fatal("lock still held")
	}
}

func TestLockUnreachableClusterExitsWithFailure(t *testing.T) {
	r := runCLI(t, "lock", "--endpoints", "http://127.0.0.1:1", "--retry-timeout", "300ms",
		testLock(t), "--", "sh", "-c", "echo ran")
	if r.code != exitFailure || r.stdout != "" {
		t.Fatalf("exit %d, stdout %q", r.code, r.stdout)
	}
}

// waitForFile waits until path has content and returns it.
func waitForFile(t *testing.T, path string) string {
	t.Helper()
	var data []byte
	testkit.Eventually(t, 15*time.Second, path, func() bool {
		var err error
		data, err = os.ReadFile(path)
		return err == nil && strings.HasSuffix(string(data), "\n")
	})
	return strings.TrimSpace(string(data))
}

// processGone reports whether pid has exited (a zombie counts as exited).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}

func TestLostSessionTerminatesCommand(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	dir := t.TempDir()
	t.Setenv("DIR", dir)
	script := `trap 'echo terminated >> "$DIR/out"; exit 0' TERM
echo "$RAFTLOCK_SESSION" > "$DIR/session.tmp"; mv "$DIR/session.tmp" "$DIR/session"
while :; do sleep 0.05; done`
	cmd, stdout, stderr := startCLI(t, "lock", "--ttl", "3s", name, "--", "sh", "-c", script)
	session := waitForFile(t, filepath.Join(dir, "session"))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Raw().DestroySession(ctx, session); err != nil {
		t.Fatal(err)
	}
	r := finish(t, cmd, stdout, stderr, 20*time.Second)
	if r.code != exitLockLost || !strings.Contains(r.stderr, "lost lock") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	// One prefix, and the cause: destroyed, which the session could not have been by expiry.
	t.Logf("stderr: %s", r.stderr)
	onePrefixPerLine(t, r.stderr)
	if !strings.Contains(r.stderr, "session "+session+" was destroyed") {
		t.Fatalf("the message does not say that the session was destroyed:\n%s", r.stderr)
	}
	if got := waitForFile(t, filepath.Join(dir, "out")); got != "terminated" {
		t.Fatalf("the command did not get SIGTERM: %q", got)
	}
}

// onePrefixPerLine fails the test if a line of stderr says "raftlock:" more than once.
func onePrefixPerLine(t *testing.T, stderr string) {
	t.Helper()
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Count(line, "raftlock:") > 1 {
			t.Errorf("more than one \"raftlock:\" in %q", line)
		}
	}
}

// A session that expired, because raftlock was stopped for longer than its TTL, is reported
// as such, not as destroyed.
func TestExpiredSessionIsReportedAsExpired(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	dir := t.TempDir()
	t.Setenv("DIR", dir)
	script := `trap 'exit 0' TERM
echo "$RAFTLOCK_SESSION" > "$DIR/session.tmp"; mv "$DIR/session.tmp" "$DIR/session"
while :; do sleep 0.05; done`
	cmd, stdout, stderr := startCLI(t, "lock", "--ttl", "2s", name, "--", "sh", "-c", script)
	waitForFile(t, filepath.Join(dir, "session"))
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	continued := false
	defer func() {
		if !continued {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	// Stopped, raftlock renews nothing: the server lets the session expire.
	testkit.Eventually(t, 15*time.Second, "the lock to be freed by the expiry", func() bool { return lockIsFree(t, c, name) })
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	continued = true
	r := finish(t, cmd, stdout, stderr, 20*time.Second)
	if r.code != exitLockLost {
		t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, exitLockLost, r.stderr)
	}
	t.Logf("stderr: %s", r.stderr)
	onePrefixPerLine(t, r.stderr)
	if !strings.Contains(r.stderr, "expired") || strings.Contains(r.stderr, "was destroyed") {
		t.Fatalf("the message does not say that the session expired:\n%s", r.stderr)
	}
}

func TestLostSessionKillsCommandThatIgnoresSIGTERM(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	dir := t.TempDir()
	t.Setenv("DIR", dir)
	// The command ignores SIGTERM and has a child of its own, which must die too.
	script := `trap '' TERM
sleep 600 &
echo "$RAFTLOCK_SESSION $!" > "$DIR/info.tmp"; mv "$DIR/info.tmp" "$DIR/info"
while :; do sleep 0.05; done`
	cmd, stdout, stderr := startCLI(t, "lock", "--ttl", "3s", "--grace", "200ms", name, "--", "sh", "-c", script)
	info := strings.Fields(waitForFile(t, filepath.Join(dir, "info")))
	grandchild, _ := strconv.Atoi(info[1])
	t.Cleanup(func() { _ = syscall.Kill(grandchild, syscall.SIGKILL) })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Raw().DestroySession(ctx, info[0]); err != nil {
		t.Fatal(err)
	}
	r := finish(t, cmd, stdout, stderr, 20*time.Second)
	if r.code != exitLockLost {
		t.Fatalf("exit %d, want %d; stderr:\n%s", r.code, exitLockLost, r.stderr)
	}
	if !strings.Contains(r.stderr, "exit status 137") {
		t.Fatalf("the command was not SIGKILLed: %s", r.stderr)
	}
	testkit.Eventually(t, 5*time.Second, "the command's child to die", func() bool { return processGone(grandchild) })
}

func TestLockDelayFlagReachesTheSession(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	dir := t.TempDir()
	t.Setenv("DIR", dir)
	script := `echo "$RAFTLOCK_SESSION" > "$DIR/session.tmp"; mv "$DIR/session.tmp" "$DIR/session"
while [ ! -e "$DIR/done" ]; do sleep 0.05; done`
	cmd, stdout, stderr := startCLI(t, "lock", "--lock-delay", "7s", name, "--", "sh", "-c", script)
	session := waitForFile(t, filepath.Join(dir, "session"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Raw().GetSession(ctx, session)
	if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, cmd, stdout, stderr, 20*time.Second); r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if err != nil || info.LockDelay != "7s" {
		t.Fatalf("the command's session: %+v, %v; want a lock-delay of 7s", info, err)
	}
	r := runCLI(t, "lock", "--lock-delay", "61s", name, "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "lock_delay") {
		t.Fatalf("--lock-delay 61s: exit %d, stderr %q; want the server's refusal", r.code, r.stderr)
	}
}

// A --grace that does not fit in the safety margin would let the command run on after the
// server may have handed the lock to someone else: lock and elect refuse it, and say why,
// before taking anything. A grace equal to the margin leaves nothing for clock-rate error and
// the kill itself, so it is refused too: at most margin - TTL/1000 - max(margin/10, 100ms). So
// is a margin of TTL/2 or more, and one too small to leave any grace.
func TestGraceAndSafetyMarginAreBounded(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	for _, cmd := range []string{"lock", "elect"} {
		r := runCLI(t, cmd, "--ttl", "10s", "--grace", "3s", name, "--", "sh", "-c", "echo ran")
		if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "--grace 3s does not fit in the safety margin 2s") ||
			!strings.Contains(r.stderr, "hand the lock to someone else") {
			t.Fatalf("%s with --grace above the default margin: exit %d, stdout %q, stderr %q", cmd, r.code, r.stdout, r.stderr)
		}
		// Equal to the margin: no headroom. 2s - 10ms - 200ms = 1.79s.
		for _, args := range [][]string{{"--grace", "2s"}, {"--safety-margin", "2s", "--grace", "2s"}, {"--grace", "1.8s"}} {
			r = runCLI(t, append(append([]string{cmd, "--ttl", "10s"}, args...), name, "--", "sh", "-c", "echo ran")...)
			if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "does not fit in the safety margin 2s") ||
				!strings.Contains(r.stderr, "at most 2s - 10ms - 200ms = 1.79s") {
				t.Fatalf("%s %v: exit %d, stdout %q, stderr %q", cmd, args, r.code, r.stdout, r.stderr)
			}
		}
		r = runCLI(t, cmd, "--ttl", "10s", "--safety-margin", "5s", name, "--", "sh", "-c", "echo ran")
		if r.code != exitFailure || r.stdout != "" || !strings.Contains(r.stderr, "--safety-margin 5s must be positive and less than half the TTL") {
			t.Fatalf("%s with a margin of TTL/2: exit %d, stdout %q, stderr %q", cmd, r.code, r.stdout, r.stderr)
		}
		r = runCLI(t, cmd, "--ttl", "10s", "--safety-margin", "2s", "--grace", "3s", name, "--", "sh", "-c", "echo ran")
		if r.code != exitFailure || !strings.Contains(r.stderr, "--grace 3s does not fit in the safety margin 2s") {
			t.Fatalf("%s with --grace above --safety-margin: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
		r = runCLI(t, cmd, "--ttl", "10s", "--safety-margin", "100ms", name, "--", "sh", "-c", "echo ran")
		if r.code != exitFailure || !strings.Contains(r.stderr, "--safety-margin 100ms leaves no time for COMMAND to stop") {
			t.Fatalf("%s with a margin too small for any grace: exit %d, stderr %q", cmd, r.code, r.stderr)
		}
	}
	if !lockIsFree(t, c, name) {
		t.Fatal("a refused run took the lock")
	}
	for _, args := range [][]string{{"--safety-margin", "4s", "--grace", "3s"}, {"--grace", "1.79s"}} {
		r := runCLI(t, append(append([]string{"lock", "--ttl", "10s"}, args...), name, "--", "sh", "-c", "echo ran")...)
		if r.code != 0 || r.stdout != "ran\n" {
			t.Fatalf("%v, within the margin: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	r := runCLI(t, "lock", "--help")
	if !strings.Contains(r.stdout, "--safety-margin") || !strings.Contains(r.stdout, "margin - TTL/1000 - max(margin/10, 100ms)") {
		t.Fatalf("lock --help does not say the arithmetic of the margin:\n%s", r.stdout)
	}
}
