package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

func TestInspectionCommands(t *testing.T) {
	c := testClient(t)
	name := testLock(t) + "/a"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx, client.WithSessionName("inspected"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	m := client.NewMutex(s, name, client.WithValue("host-a:80"))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	var locks api.LockList
	decodeRun(t, &locks, "locks", "--prefix", testLock(t), "-o", "json")
	if len(locks.Locks) != 1 || locks.Locks[0].Name != name || locks.Locks[0].Token != m.Token() {
		t.Fatalf("locks -o json: %+v", locks)
	}
	out := mustRun(t, "locks", "--prefix", testLock(t))
	if !strings.Contains(out, "NAME") || !strings.Contains(out, name) || !strings.Contains(out, "host-a:80") {
		t.Fatalf("locks table:\n%s", out)
	}
	out = mustRun(t, "lock-info", name)
	for _, want := range []string{"held:", "true", s.ID() + " (inspected)", strconv.FormatUint(m.Token(), 10), "host-a:80"} {
		if !strings.Contains(out, want) {
			t.Fatalf("lock-info lacks %q:\n%s", want, out)
		}
	}
	// A stale read answers from the first endpoint, which may be a follower that has not
	// applied the grant yet; it catches up.
	testkit.Eventually(t, 5*time.Second, "lock-info --stale -o json to show the holder", func() bool {
		var l api.Lock
		decodeRun(t, &l, "lock-info", name, "-o", "json", "--stale")
		return l.Session == s.ID() && l.Held
	})
	var sessions api.SessionList
	decodeRun(t, &sessions, "sessions", "-o", "json")
	found := false
	for _, si := range sessions.Sessions {
		if si.ID == s.ID() {
			found = len(si.Locks) == 1 && si.Locks[0] == name && si.Name == "inspected"
		}
	}
	if !found {
		t.Fatalf("sessions -o json lacks our session with its lock: %+v", sessions)
	}
	// Members publish their HTTP addresses through the log shortly after the cluster starts.
	testkit.Eventually(t, 10*time.Second, "every member's HTTP address", func() bool {
		cl, err := c.Raw().Cluster(ctx)
		if err != nil {
			return false
		}
		for _, m := range cl.Members {
			if m.HTTPAddr == "" {
				return false
			}
		}
		return true
	})
	var members api.MembersResponse
	decodeRun(t, &members, "members", "-o", "json")
	if len(members.Members) != 3 {
		t.Fatalf("members: %+v", members)
	}
	var st statusOutput
	decodeRun(t, &st, "status", "-o", "json")
	if st.Leader == "" || len(st.Members) != 3 {
		t.Fatalf("status: %+v", st)
	}
	for _, ms := range st.Members {
		if ms.Health != "ready" || ms.AppliedIndex == 0 {
			t.Fatalf("status of %s: %+v", ms.ID, ms)
		}
	}
	if out := mustRun(t, "status"); !strings.Contains(out, "HEALTH") || !strings.Contains(out, "leader: "+st.Leader) {
		t.Fatalf("status table:\n%s", out)
	}
	if out := mustRun(t, "__complete", "lock-info", testLock(t)); !strings.Contains(out, name+"\n") {
		t.Fatalf("completion of lock names:\n%s", out)
	}
	if r := runCLI(t, "locks", "-o", "yaml"); r.code != exitFailure {
		t.Fatalf("-o yaml: exit %d", r.code)
	}
}

// mustRun runs the binary and returns its stdout, failing the test on a non-zero exit.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	r := runCLI(t, args...)
	if r.code != 0 {
		t.Fatalf("raftlock %q: exit %d, stderr:\n%s", args, r.code, r.stderr)
	}
	return r.stdout
}

// decodeRun runs the binary and decodes its JSON output into v.
func decodeRun(t *testing.T, v any, args ...string) {
	t.Helper()
	out := mustRun(t, args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("raftlock %q printed no JSON (%v):\n%s", args, err, out)
	}
}

func TestElectRunsCommandWhileLeading(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	t.Setenv("RAFTLOCK_BIN", cliEnv.bin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	first := client.NewElection(s, name)
	if err := first.Campaign(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	// The command reads the election from inside: it leads, with its value and token.
	cmd, stdout, stderr := startCLI(t, "elect", "--value", "second", name, "--", "sh", "-c",
		`echo "$RAFTLOCK_FENCING_TOKEN $RAFTLOCK_VALUE"; "$RAFTLOCK_BIN" lock-info "$RAFTLOCK_LOCK" -o json`)
	testkit.Eventually(t, 10*time.Second, "the candidate to queue", func() bool {
		l, err := c.GetLock(ctx, name)
		return err == nil && l.Waiters == 1
	})
	if stdout.Len() != 0 {
		t.Fatalf("the command ran while another candidate led: %s", stdout)
	}
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	r := finish(t, cmd, stdout, stderr, 20*time.Second)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	head, rest, _ := strings.Cut(r.stdout, "\n")
	var l api.Lock
	if err := json.Unmarshal([]byte(rest), &l); err != nil {
		t.Fatalf("output %q: %v", r.stdout, err)
	}
	if head != strconv.FormatUint(l.Token, 10)+" second" || !l.Held || l.Value != "second" {
		t.Fatalf("the command saw %q and the lock %+v", head, l)
	}
	if !lockIsFree(t, c, name) {
		t.Fatal("raftlock did not resign after the command exited")
	}
}

func TestElectCampaignsAgainAfterLosingLeadership(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	dir := t.TempDir()
	t.Setenv("DIR", dir)
	script := `if [ -e "$DIR/ran" ]; then echo "again $RAFTLOCK_SESSION"; exit 0; fi
touch "$DIR/ran"
echo "$RAFTLOCK_SESSION" > "$DIR/session.tmp"; mv "$DIR/session.tmp" "$DIR/session"
while :; do sleep 0.05; done`
	cmd, stdout, stderr := startCLI(t, "elect", "--ttl", "3s", name, "--", "sh", "-c", script)
	session := waitForFile(t, filepath.Join(dir, "session"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Raw().DestroySession(ctx, session); err != nil {
		t.Fatal(err)
	}
	r := finish(t, cmd, stdout, stderr, 20*time.Second)
	if r.code != 0 || !strings.Contains(r.stderr, "campaigning again") || !strings.Contains(r.stderr, "session "+session+" was destroyed") {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	onePrefixPerLine(t, r.stderr)
	f := strings.Fields(r.stdout)
	if len(f) != 2 || f[0] != "again" || f[1] == session {
		t.Fatalf("second run printed %q; want a new session", r.stdout)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err != nil {
		t.Fatal(err)
	}
}

// `raftlock locks` prints a row for every grant: both permits of a semaphore and both
// shared holds of a lock, each with its session and token, the semaphore's limit and the
// holds' mode.
func TestLocksTableShowsEveryHolder(t *testing.T) {
	c := testClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sem, rw := testLock(t)+"/sem", testLock(t)+"/rw"
	type grant struct {
		session, lock, mode, limit string
		token                      uint64
	}
	var want []grant
	for range 2 {
		s, err := c.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		x := client.NewSemaphore(s, sem, 2)
		if err := x.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		r := client.NewRWMutex(s, rw)
		if err := r.RLock(ctx); err != nil {
			t.Fatal(err)
		}
		want = append(want, grant{s.ID(), sem, "-", "2", x.Token()}, grant{s.ID(), rw, "shared", "-", r.Token()})
	}
	out := mustRun(t, "locks", "--prefix", testLock(t))
	if !strings.Contains(out, "MODE") || !strings.Contains(out, "LIMIT") {
		t.Fatalf("locks table without MODE and LIMIT:\n%s", out)
	}
	rows := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		rows++
		found := false
		for _, g := range want {
			found = found || len(f) >= 6 && f[0] == g.lock && f[2] == g.session && f[3] == strconv.FormatUint(g.token, 10) &&
				f[4] == g.mode && f[5] == g.limit
		}
		if !found {
			t.Fatalf("row %q is none of the grants %+v:\n%s", line, want, out)
		}
	}
	if rows != len(want) {
		t.Fatalf("%d rows for %d grants:\n%s", rows, len(want), out)
	}
}

// `raftlock sessions destroy ID` ends the session and frees its lock; a second time the
// session is not found, and the command says so with exit code 1.
func TestSessionsDestroyEndsTheSession(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	m := holdLock(t, c, name)
	id := m.Session().ID()
	var d api.DestroyResponse
	decodeRun(t, &d, "sessions", "destroy", id, "-o", "json")
	if len(d.Released) != 1 || d.Released[0] != name {
		t.Fatalf("sessions destroy released %+v, want [%s]", d.Released, name)
	}
	if !lockIsFree(t, c, name) {
		t.Fatalf("%s is still held after its session was destroyed", name)
	}
	select {
	case <-m.Session().Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the destroyed session's client still believes it holds its session")
	}
	r := runCLI(t, "sessions", "destroy", id)
	if r.code != exitFailure || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("destroying it again: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, "sessions", "destroy"); r.code != exitFailure {
		t.Fatalf("destroy without an id: exit %d", r.code)
	}
}

// `raftlock locks release --force NAME` takes the lock from its only holder by ending the
// holder's session, which it names; without --force it refuses, and a semaphore with two
// holders needs --token.
func TestLocksReleaseForceTakesTheLockFromItsHolder(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	m := holdLock(t, c, name)
	if r := runCLI(t, "locks", "release", name); r.code != exitFailure || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("without --force: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	var res api.ReleaseResponse
	decodeRun(t, &res, "locks", "release", "--force", name, "-o", "json")
	if !res.Released || res.EndedSession != m.Session().ID() || len(res.HeldBack) != 1 || res.HeldBack[0] != name {
		t.Fatalf("locks release --force answered %+v", res)
	}
	if !lockIsFree(t, c, name) {
		t.Fatalf("%s is still held after a forced release", name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sem := testLock(t) + "-sem"
	var tokens []uint64
	for range 2 {
		s, err := c.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		x := client.NewSemaphore(s, sem, 2)
		if err := x.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, x.Token())
	}
	if r := runCLI(t, "locks", "release", "--force", sem); r.code != exitFailure || !strings.Contains(r.stderr, "--fencing-token") {
		t.Fatalf("two holders without --token: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	out := mustRun(t, "locks", "release", "--force", sem, "--fencing-token", strconv.FormatUint(tokens[1], 10))
	if !strings.Contains(out, "ended session") {
		t.Fatalf("locks release --force --token printed:\n%s", out)
	}
	l, err := c.GetLock(ctx, sem)
	if err != nil || len(l.Holders) != 1 || l.Holders[0].Token != tokens[0] {
		t.Fatalf("after taking one permit the semaphore is %+v, %v", l, err)
	}
}

// lock-info, sessions and locks say who waits and since when: the holder's grant time, the
// queue in order with the waiter's session and name, and the lock a waiting session waits for
// (not "-").
func TestInspectionShowsWhoWaitsAndSinceWhen(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holdLock(t, c, name)
	s, err := c.NewSession(ctx, client.WithSessionName("patient"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	waited := make(chan error, 1)
	go func() { waited <- client.NewMutex(s, name).Lock(waitCtx) }()
	testkit.Eventually(t, 10*time.Second, "the waiter to queue", func() bool {
		l, err := c.GetLock(ctx, name)
		return err == nil && l.Waiters == 1
	})

	out := mustRun(t, "lock-info", name)
	for _, want := range []string{"since:", " ago)", "queue:", "1. " + s.ID() + " (patient) exclusive waiting since 20"} {
		if !strings.Contains(out, want) {
			t.Fatalf("lock-info lacks %q:\n%s", want, out)
		}
	}
	out = mustRun(t, "sessions")
	found := false
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, s.ID()) {
			found = strings.Contains(line, name+" (")
		}
	}
	if !strings.Contains(out, "WAITING") || !found {
		t.Fatalf("sessions does not show %s waiting for %s:\n%s", s.ID(), name, out)
	}
	out = mustRun(t, "locks", "--prefix", name)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "AGE") || !strings.Contains(lines[0], "LONGEST WAIT") {
		t.Fatalf("locks table:\n%s", out)
	}
	if f := strings.Fields(lines[1]); len(f) < 9 || f[6] == "-" || f[8] == "-" {
		t.Fatalf("locks row without the grant's age or the longest wait: %q", lines[1])
	}
	stopWaiting()
	<-waited
}
