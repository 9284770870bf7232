package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/raftlock/raftlock/jepsen"
	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/nemesis"
)

// selfTest checks that the checkers bite: every synthetic history gets its expected verdict,
// and a run whose resource ignores tokens, under client pauses, fails the fencing checker.
func selfTest(ctx context.Context, cfg jepsen.Config, stdout, stderr io.Writer) int {
	passed, failed := 0, 0
	expect := func(ok bool, format string, args ...any) {
		verdict := "ok  "
		if ok {
			passed++
		} else {
			failed++
			verdict = "BAD "
		}
		fmt.Fprintf(stdout, "%s %s\n", verdict, fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(stdout, "== synthetic histories")
	for _, c := range checker.SyntheticCases() {
		r := c.Run()
		want := "flagged"
		if c.Valid {
			want = "passed"
		}
		expect(r.Valid == c.Valid, "%-70s want %s: %s", c.Name, want, r.Line())
	}

	fmt.Fprintln(stdout, "\n== a resource that ignores tokens, under client pauses (must fail fencing)")
	cfg.IgnoreTokens = true
	cfg.Faults = []string{nemesis.ClientPause}
	cfg.Time = min(cfg.Time, 30*time.Second)
	cfg.Dir = filepath.Join(cfg.Dir, "ignore-tokens")
	rep, err := jepsen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return exitError
	}
	rep.Print(stdout)
	fencing, _ := rep.Result("fencing")
	expect(!fencing.Valid, "fencing flags the token-ignoring resource: %s", fencing.Line())
	fmt.Fprintf(stdout, "\n%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return exitViolation
	}
	return exitOK
}
