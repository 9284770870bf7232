package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen"
	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/faultfs"
	"github.com/raftlock/raftlock/jepsen/history"
	"github.com/raftlock/raftlock/jepsen/nemesis"
)

// recheck runs the history checkers on a recorded history and writes the visualisation beside
// it. Convergence needs the live cluster and is not re-checked.
func recheck(cfg jepsen.Config, path string, stdout, stderr io.Writer) int {
	ops, err := history.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return exitError
	}
	cc := cfg.CheckerConfig()
	for _, op := range ops {
		cc.ExpectStaleWrites = cc.ExpectStaleWrites || op.Fault == nemesis.ClientPause
	}
	results, lin := checker.CheckHistory(ops, cc)
	fmt.Fprintf(stdout, "%s: %d ops\n", path, len(ops))
	for _, r := range results {
		fmt.Fprintln(stdout, r.String())
	}
	html := strings.TrimSuffix(path, filepath.Ext(path)) + ".recheck.html"
	if err := lin.WriteHTML(html, history.Faults(ops)); err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
	} else {
		fmt.Fprintf(stdout, "visualisation: %s\n", html)
	}
	passed, failed := checker.Tally(results)
	fmt.Fprintf(stdout, "\n%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return exitViolation
	}
	return exitOK
}

// selfTest checks that the checkers bite: every synthetic history gets its expected verdict, a
// run whose resource ignores tokens, under client pauses, fails the fencing checker, a run
// whose Go-client workers ignore Done (they go on believing they hold a lock after their
// session is gone), under client pauses, fails the belief checker, a run whose watchers miss
// changes fails the watch checker, and (where FUSE works) a run
// whose agents skip the log's fsync, under power losses of every node, fails durability or
// linearizability.
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
	tokens := cfg
	tokens.IgnoreTokens = true
	tokens.Faults = []string{nemesis.ClientPause}
	tokens.Time = min(cfg.Time, 30*time.Second)
	tokens.Dir = filepath.Join(cfg.Dir, "ignore-tokens")
	rep, err := jepsen.Run(ctx, tokens)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return exitError
	}
	rep.Print(stdout)
	fencing, _ := rep.Result("fencing")
	expect(!fencing.Valid, "fencing flags the token-ignoring resource: %s", fencing.Line())

	fmt.Fprintln(stdout, "\n== Go-client workers that ignore Done, under client pauses (must fail belief)")
	done := cfg
	done.IgnoreDone, done.Workload = true, jepsen.WorkloadClient
	done.Faults = []string{nemesis.ClientPause}
	done.Time = min(cfg.Time, 30*time.Second)
	done.Dir = filepath.Join(cfg.Dir, "ignore-done")
	if rep, err = jepsen.Run(ctx, done); err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return exitError
	}
	rep.Print(stdout)
	belief, _ := rep.Result("belief")
	expect(!belief.Valid, "belief flags the workers that go on believing after their session is gone: %s", belief.Line())

	fmt.Fprintln(stdout, "\n== watchers that miss one change in seven (must fail watch)")
	drop := cfg
	drop.DropWatchChanges, drop.Watchers = true, max(cfg.Watchers, 2)
	drop.Faults = nil
	drop.Time = min(cfg.Time, 10*time.Second)
	drop.Dir = filepath.Join(cfg.Dir, "drop-watch-changes")
	if rep, err = jepsen.Run(ctx, drop); err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return exitError
	}
	rep.Print(stdout)
	watch, _ := rep.Result("watch")
	expect(!watch.Valid, "watch flags the watchers that miss changes: %s", watch.Line())

	fmt.Fprintln(stdout, "\n== agents that skip the Raft log's fsync, under power losses of every node (must fail durability or linearizability)")
	if err := faultfs.Available(); err != nil {
		fmt.Fprintf(stdout, "SKIPPED: FUSE is not available here (%v), so power losses cannot be injected\n", err)
	} else {
		power := cfg
		power.UnsafeNoLogFsync, power.LogStore = true, "boltdb" // an unsynced bbolt file goes back to empty
		power.Faults = []string{nemesis.PowerLossAll}
		power.Time = min(cfg.Time, 20*time.Second)
		power.Dir = filepath.Join(cfg.Dir, "no-log-fsync")
		if rep, err = jepsen.Run(ctx, power); err != nil {
			fmt.Fprintln(stderr, "jepsen:", err)
			return exitError
		}
		rep.Print(stdout)
		dur, _ := rep.Result("durability")
		lin, _ := rep.Result("linearizable")
		expect(!dur.Valid || !lin.Valid, "durability or linearizability flags the lost writes: %s / %s", dur.Line(), lin.Line())
	}
	fmt.Fprintf(stdout, "\n%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return exitViolation
	}
	return exitOK
}
