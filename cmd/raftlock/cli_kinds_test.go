package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/internal/testkit"
)

// holdScript records when COMMAND starts and ends, with its fencing token and a label ($0),
// and holds the lock a second in between, so that runs that were not excluded would overlap.
const holdScript = `echo "start $RAFTLOCK_FENCING_TOKEN $0" >> "$OUT"; sleep 1; echo "end $RAFTLOCK_FENCING_TOKEN $0" >> "$OUT"`

// span is one run's time inside the lock, as places in the record of starts and ends.
type span struct {
	label      string
	token      uint64
	start, end int
}

// readSpans reads the record of the runs, which must each have started and ended once.
func readSpans(t *testing.T, out string, runs int) []span {
	t.Helper()
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	byToken := map[uint64]*span{}
	var order []uint64
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		tok, err := strconv.ParseUint(f[1], 10, 64)
		if len(f) != 3 || err != nil || tok == 0 {
			t.Fatalf("line %q of\n%s", line, data)
		}
		s := byToken[tok]
		switch {
		case f[0] == "start" && s == nil:
			byToken[tok] = &span{label: f[2], token: tok, start: i, end: -1}
			order = append(order, tok)
		case f[0] == "end" && s != nil && s.end < 0:
			s.end = i
		default:
			t.Fatalf("token %d started twice or ended before it started:\n%s", tok, data)
		}
	}
	if len(order) != runs {
		t.Fatalf("%d runs with distinct tokens, want %d:\n%s", len(order), runs, data)
	}
	spans := make([]span, len(order))
	for i, tok := range order {
		if byToken[tok].end < 0 {
			t.Fatalf("token %d never ended:\n%s", tok, data)
		}
		spans[i] = *byToken[tok]
	}
	return spans
}

// mostAtOnce returns the most spans open at one place of the record.
func mostAtOnce(spans []span) int {
	most := 0
	for _, s := range spans {
		n := 0
		for _, o := range spans {
			if o.start <= s.start && s.start < o.end {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// Six concurrent runs of `raftlock lock --limit 2 --wait 30s` never run more than two
// commands at once, do run two at once, each under a token of its own, and all finish.
func TestLockLimitRunsAtMostNAtOnce(t *testing.T) {
	name := testLock(t)
	out := filepath.Join(t.TempDir(), "out")
	t.Setenv("OUT", out)
	const runs = 6
	var all []func() cliResult
	for range runs {
		cmd, stdout, stderr := startCLI(t, "lock", "--limit", "2", "--wait", "30s", "--ttl", "5s", name, "--", "sh", "-c", holdScript, "run")
		all = append(all, func() cliResult { return finish(t, cmd, stdout, stderr, 40*time.Second) })
	}
	for _, f := range all {
		if r := f(); r.code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	}
	if most := mostAtOnce(readSpans(t, out, runs)); most != 2 {
		t.Fatalf("%d commands ran at once under --limit 2", most)
	}
	// Another limit while it is held is refused, and so are limits out of range.
	holder, stdout, stderr := startCLI(t, "lock", "--limit", "2", name, "--", "sleep", "3")
	c := testClient(t)
	testkit.Eventually(t, 15*time.Second, "the holder to start", func() bool { return !lockIsFree(t, c, name) })
	if r := runCLI(t, "lock", "--limit", "3", name, "--", "true"); r.code != 1 || !strings.Contains(r.stderr, "limit") {
		t.Fatalf("--limit 3 on a semaphore of 2: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"--limit", "0"}, {"--limit", "1001"}, {"--limit", "2", "--shared"}} {
		if r := runCLI(t, append(append([]string{"lock"}, bad...), name, "--", "true")...); r.code != 1 {
			t.Fatalf("%v: exit %d, stderr:\n%s", bad, r.code, r.stderr)
		}
	}
	if r := finish(t, holder, stdout, stderr, 30*time.Second); r.code != 0 {
		t.Fatalf("holder: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// Runs with --shared overlap; a run without it overlaps none, and the shared runs that come
// while it waits run after it.
func TestLockSharedReadersOverlapAndAWriterOverlapsNone(t *testing.T) {
	name := testLock(t)
	out := filepath.Join(t.TempDir(), "out")
	t.Setenv("OUT", out)
	var all []func() cliResult
	start := func(label string, args ...string) {
		args = append(append([]string{"lock", "--wait", "30s", "--ttl", "5s"}, args...), name, "--", "sh", "-c", holdScript, label)
		cmd, stdout, stderr := startCLI(t, args...)
		all = append(all, func() cliResult { return finish(t, cmd, stdout, stderr, 40*time.Second) })
	}
	c := testClient(t)
	start("reader", "--shared")
	start("reader", "--shared")
	testkit.Eventually(t, 15*time.Second, "a reader inside", func() bool { return !lockIsFree(t, c, name) })
	start("writer")
	testkit.Eventually(t, 15*time.Second, "the writer waiting", func() bool {
		l, err := c.GetLock(t.Context(), name)
		return err == nil && l.Waiters >= 1
	})
	start("late-reader", "--shared")
	start("late-reader", "--shared")
	for _, f := range all {
		if r := f(); r.code != 0 {
			t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
		}
	}
	spans := readSpans(t, out, 5)
	var writer span
	var readers []span
	for _, s := range spans {
		if s.label == "writer" {
			writer = s
		} else {
			readers = append(readers, s)
		}
	}
	for _, r := range readers {
		if r.start < writer.end && writer.start < r.end {
			t.Fatalf("reader %d overlapped the writer %d", r.token, writer.token)
		}
		if r.label == "late-reader" && r.start < writer.end {
			t.Fatalf("reader %d that came while the writer waited ran before it", r.token)
		}
	}
	if mostAtOnce(readers) < 2 {
		t.Fatal("no two readers ran at once")
	}
}
