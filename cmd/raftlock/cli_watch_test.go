package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// `raftlock watch --prefix P -o json` prints a resync, then one JSON object per change, in
// order, a release reading free, and nothing of locks beside the prefix; the text form prints
// one line per change; SIGINT ends it with status 0.
func TestWatchPrintsEveryChange(t *testing.T) {
	c := testClient(t)
	pre := testLock(t) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holdLock(t, c, pre+"held")
	jsonCmd, jsonOut, jsonErr := startCLI(t, "watch", "--prefix", pre, "-o", "json")
	textCmd, textOut, textErr := startCLI(t, "watch", "--prefix", pre)
	testkit.Eventually(t, 15*time.Second, "both watches to print their resync", func() bool {
		return strings.Count(jsonOut.String(), "\n") >= 1 && strings.Count(textOut.String(), "\n") >= 2
	})
	holdLock(t, c, strings.TrimSuffix(pre, "/")+"-beside")
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	m := client.NewMutex(s, pre+"a", client.WithValue("v"))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	token := m.Token()
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 15*time.Second, "both watches to print the two changes", func() bool {
		return strings.Count(jsonOut.String(), "\n") >= 3 && strings.Count(textOut.String(), "\n") >= 4
	})
	var lines []watchLine
	for _, l := range strings.Split(strings.TrimSpace(jsonOut.String()), "\n") {
		var wl watchLine
		if err := json.Unmarshal([]byte(l), &wl); err != nil {
			t.Fatalf("line %q is not a JSON object: %v", l, err)
		}
		lines = append(lines, wl)
	}
	if len(lines) != 3 || lines[0].Event != "resync" || len(lines[0].Locks) != 1 || lines[0].Locks[0].Name != pre+"held" {
		t.Fatalf("json lines %+v: want a resync listing %sheld, then two changes", lines, pre)
	}
	grant, free := lines[1], lines[2]
	if grant.Event != "change" || grant.Lock.Name != pre+"a" || !grant.Lock.Held || grant.Lock.Token != token ||
		grant.Lock.Value != "v" || grant.Index != token {
		t.Fatalf("the grant printed as %+v (lock %+v)", grant, grant.Lock)
	}
	if free.Event != "change" || free.Lock.Name != pre+"a" || free.Lock.Held || free.Index <= token {
		t.Fatalf("the release printed as %+v (lock %+v)", free, free.Lock)
	}
	text := strings.Split(strings.TrimSpace(textOut.String()), "\n")
	if len(text) != 4 || !strings.Contains(text[0], "resync: 1 locks") ||
		!strings.Contains(text[2], fmt.Sprintf("%d %sa held by %s token %d", token, pre, s.ID(), token)) ||
		!strings.HasSuffix(text[3], pre+"a free waiters 0") {
		t.Fatalf("text output:\n%s", textOut)
	}
	if err := jsonCmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, jsonCmd, jsonOut, jsonErr, 10*time.Second); r.code != 0 {
		t.Fatalf("watch ended with %d on SIGINT; stderr:\n%s", r.code, r.stderr)
	}
	if err := textCmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if r := finish(t, textCmd, textOut, textErr, 10*time.Second); r.code != 0 {
		t.Fatalf("watch ended with %d on SIGINT; stderr:\n%s", r.code, r.stderr)
	}
}

// `watch --index N` resumes after N: it prints the changes after N, in order, with no resync
// first, as a watch that had printed the line of index N would have gone on.
func TestWatchResumesAfterIndex(t *testing.T) {
	c := testClient(t)
	pre := testLock(t) + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	a := client.NewMutex(s, pre+"a")
	if err := a.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	granted := a.Token()
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	b := client.NewMutex(s, pre+"b")
	if err := b.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	cmd, out, errOut := startCLI(t, "watch", "--prefix", pre, "--index", fmt.Sprint(granted), "-o", "json")
	testkit.Eventually(t, 15*time.Second, "the watch to print the two changes after the grant", func() bool {
		return strings.Count(out.String(), "\n") >= 2
	})
	_ = cmd.Process.Signal(syscall.SIGINT)
	r := finish(t, cmd, out, errOut, 10*time.Second)
	var lines []watchLine
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var wl watchLine
		if err := json.Unmarshal([]byte(l), &wl); err != nil {
			t.Fatalf("line %q is not a JSON object (exit %d, stderr %s): %v", l, r.code, r.stderr, err)
		}
		lines = append(lines, wl)
	}
	if len(lines) != 2 || lines[0].Event != "change" || lines[0].Lock.Name != pre+"a" || lines[0].Lock.Held || lines[0].Index <= granted ||
		lines[1].Event != "change" || lines[1].Lock.Name != pre+"b" || lines[1].Lock.Token != b.Token() {
		t.Fatalf("watch --index %d printed %s", granted, r.stdout)
	}
}

// `raftlock watch` with --prefix twice follows both over one stream; with --long-poll it
// prints the same lines by long poll.
func TestWatchSeveralPrefixesAndLongPoll(t *testing.T) {
	c := testClient(t)
	pre := testLock(t) + "/"
	manyCmd, manyOut, manyErr := startCLI(t, "watch", "--prefix", pre+"a/", "--prefix", pre+"b/", "-o", "json")
	pollCmd, pollOut, pollErr := startCLI(t, "watch", "--prefix", pre+"a/", "--long-poll", "-o", "json")
	testkit.Eventually(t, 15*time.Second, "both watches to print their resync", func() bool {
		return strings.Count(manyOut.String(), "\n") >= 1 && strings.Count(pollOut.String(), "\n") >= 1
	})
	holdLock(t, c, pre+"a/1")
	holdLock(t, c, pre+"c/1")
	holdLock(t, c, pre+"b/1")
	testkit.Eventually(t, 15*time.Second, "the changes to be printed", func() bool {
		return strings.Count(manyOut.String(), "\n") >= 3 && strings.Count(pollOut.String(), "\n") >= 2
	})
	names := func(out string) string {
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			var wl watchLine
			if err := json.Unmarshal([]byte(l), &wl); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			if wl.Lock != nil {
				got = append(got, strings.TrimPrefix(wl.Lock.Name, pre))
			}
		}
		return strings.Join(got, " ")
	}
	if got := names(manyOut.String()); got != "a/1 b/1" {
		t.Fatalf("two prefixes printed %q; want a/1 b/1", got)
	}
	if got := names(pollOut.String()); got != "a/1" {
		t.Fatalf("the long poll printed %q; want a/1", got)
	}
	if err := manyCmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	finish(t, manyCmd, manyOut, manyErr, 10*time.Second)
	if err := pollCmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	finish(t, pollCmd, pollOut, pollErr, 10*time.Second)
}
