package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Flags may come after NAME as well as before it, up to "--": README's own lines. Without
// "--", the command starts at the first word after NAME that is not a flag, and its own flags
// stay its own.
func TestRunFlagsMayFollowName(t *testing.T) {
	c := testClient(t)
	name := testLock(t)
	r := runCLI(t, "lock", name, "--wait", "1s", "--value", "v1", "--", "sh", "-c", `echo "locked $RAFTLOCK_LOCK"`)
	if r.code != 0 || r.stdout != "locked "+name+"\n" {
		t.Fatalf("lock NAME --wait 1s --value v1 -- ...: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "elect", name, "--value", "host-a", "--ttl", "5s", "--", "sh", "-c", `echo "leading as $RAFTLOCK_VALUE"`)
	if r.code != 0 || r.stdout != "leading as host-a\n" {
		t.Fatalf("elect NAME --value host-a -- ...: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "lock", "--ttl", "5s", name, "sh", "-c", `echo "$0 $1 $2"`, "--wait", "1s")
	if r.code != 0 || r.stdout != "--wait 1s \n" {
		t.Fatalf("lock NAME COMMAND --wait 1s: exit %d, stdout %q, stderr %q; want --wait passed to the command", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "lock", name, "--no-such-flag", "--", "true")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no-such-flag") {
		t.Fatalf("an unknown flag after NAME: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, "lock", name, "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Take the lock NAME") {
		t.Fatalf("lock NAME --help: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if !lockIsFree(t, c, name) {
		t.Fatal("lock still held")
	}
}

// A command that cannot be run is refused before anything is asked of the cluster (here an
// unreachable one, which would fail with exit 1 after the retry timeout), with the shell's
// codes: 127 for a command not found, 126 for one that cannot be executed.
func TestUnrunnableCommandIsRefusedBeforeTheCluster(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "serve")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"lock", "elect"} {
		for _, c := range []struct {
			argv0 string
			code  int
		}{{"./no-such-serve", exitNotFound}, {"no-such-command-in-path", exitNotFound}, {notExec, exitCannotExec}} {
			r := runCLI(t, verb, "--endpoints", "http://127.0.0.1:1", "--retry-timeout", "10s", testLock(t), "--", c.argv0)
			if r.code != c.code || !strings.Contains(r.stderr, "cannot run "+c.argv0) || strings.Contains(r.stderr, "campaigning") {
				t.Errorf("%s -- %s: exit %d, stderr %q; want %d before contacting the cluster", verb, c.argv0, r.code, r.stderr, c.code)
			}
		}
	}
}

// elect waits to be elected: it has no --wait, and its help does not promise exit 75.
func TestElectHelpListsOnlyItsExitCodes(t *testing.T) {
	elect := runCLI(t, "elect", "--help")
	lock := runCLI(t, "lock", "--help")
	if strings.Contains(elect.stdout, "75") || strings.Contains(elect.stdout, "--wait") {
		t.Fatalf("elect --help speaks of --wait or exit 75:\n%s", elect.stdout)
	}
	if !strings.Contains(lock.stdout, "75     the lock is held") || !strings.Contains(elect.stdout, "127    the command was not found") {
		t.Fatalf("lock --help or elect --help lacks its exit codes:\n%s\n%s", lock.stdout, elect.stdout)
	}
}
