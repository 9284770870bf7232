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
// changes fails the watch checker, a run whose agents start on a wiped data dir without asking
// the cluster, under disk losses, fails the disk checker, a run whose agents' restores keep the
// backup's sessions, under the restore nemesis, fails belief or held-by-nobody, and (where FUSE
// works) a run
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

	for _, c := range brokenRuns() {
		fmt.Fprintln(stdout, "\n== "+c.title)
		if c.skip != nil {
			if err := c.skip(); err != nil {
				fmt.Fprintf(stdout, "SKIPPED: "+c.skipWhy+"\n", err)
				continue
			}
		}
		run := cfg
		c.breakIt(&run)
		run.Time = min(cfg.Time, c.most)
		run.Dir = filepath.Join(cfg.Dir, c.dir)
		rep, err := jepsen.Run(ctx, run)
		if err != nil {
			fmt.Fprintln(stderr, "jepsen:", err)
			return exitError
		}
		rep.Print(stdout)
		ok, format, args := c.flagged(rep)
		expect(ok, format, args...)
	}
	fmt.Fprintf(stdout, "\n%d passed, %d failed\n", passed, failed)
	if failed > 0 {
		return exitViolation
	}
	return exitOK
}

// brokenRun is one self-test run of a broken system: what it breaks in the Config, and the
// check that the checkers flag what it breaks.
type brokenRun struct {
	title   string
	dir     string        // below the Config's Dir
	most    time.Duration // the most the run takes
	skip    func() error  // when it returns an error, the run cannot be done here
	skipWhy string        // what a skipped run says, a format for skip's error
	breakIt func(*jepsen.Config)
	// flagged returns whether the checkers flagged the run, and a format and its arguments
	// that say how.
	flagged func(*jepsen.Report) (bool, string, []any)
}

// brokenRuns are the self-test's runs of broken systems, in the order they run.
func brokenRuns() []brokenRun {
	return []brokenRun{{
		title: "a resource that ignores tokens, under client pauses (must fail fencing)",
		dir:   "ignore-tokens",
		most:  30 * time.Second,
		breakIt: func(c *jepsen.Config) {
			c.IgnoreTokens = true
			c.Faults = []string{nemesis.ClientPause}
		},
		flagged: func(rep *jepsen.Report) (bool, string, []any) {
			fencing, _ := rep.Result("fencing")
			return !fencing.Valid, "fencing flags the token-ignoring resource: %s", []any{fencing.Line()}
		},
	}, {
		title: "Go-client workers that ignore Done, under client pauses (must fail belief)",
		dir:   "ignore-done",
		most:  30 * time.Second,
		breakIt: func(c *jepsen.Config) {
			c.IgnoreDone, c.Workload = true, jepsen.WorkloadClient
			c.Faults = []string{nemesis.ClientPause}
		},
		flagged: func(rep *jepsen.Report) (bool, string, []any) {
			belief, _ := rep.Result("belief")
			return !belief.Valid, "belief flags the workers that go on believing after their session is gone: %s", []any{belief.Line()}
		},
	}, {
		title: "watchers that miss one change in seven (must fail watch)",
		dir:   "drop-watch-changes",
		most:  10 * time.Second,
		breakIt: func(c *jepsen.Config) {
			c.DropWatchChanges, c.Watchers = true, max(c.Watchers, 2)
			c.Faults = nil
		},
		flagged: func(rep *jepsen.Report) (bool, string, []any) {
			watch, _ := rep.Result("watch")
			return !watch.Valid, "watch flags the watchers that miss changes: %s", []any{watch.Line()}
		},
	}, {
		title: "streamed watchers that ignore their stream's end and stay silent, under partitions (must fail watch)",
		dir:   "ignore-stream-end",
		most:  20 * time.Second,
		breakIt: func(c *jepsen.Config) {
			c.IgnoreStreamEnd, c.Watchers = true, max(c.Watchers, 12)
			c.Faults = []string{nemesis.Partition}
		},
		flagged: func(rep *jepsen.Report) (bool, string, []any) {
			watch, _ := rep.Result("watch")
			return !watch.Valid, "watch flags the watchers that kept a silent stale stream: %s", []any{watch.Line()}
		},
	}, {
		title: "agents whose restores keep the backup's sessions, under the restore nemesis (must fail belief or held-by-nobody)",
		dir:   "restore-keeps-sessions",
		most:  40 * time.Second,
		breakIt: func(c *jepsen.Config) {
			c.UnsafeRestoreKeepsSessions, c.Workload = true, jepsen.WorkloadClient
			c.Faults = []string{nemesis.Restore}
		},
		flagged: func(rep *jepsen.Report) (bool, string, []any) {
			belief, _ := rep.Result("belief")
			nobody, _ := rep.Result("held-by-nobody")
			return !belief.Valid || !nobody.Valid, "belief or held-by-nobody flags the holds the restore changed: %s / %s",
				[]any{belief.Line(), nobody.Line()}
		},
	}, {
		title:   "agents that skip the Raft log's fsync, under power losses of every node (must fail durability or linearizability)",
		dir:     "no-log-fsync",
		most:    20 * time.Second,
		skip:    faultfs.Available,
		skipWhy: "FUSE is not available here (%v), so power losses cannot be injected",
		breakIt: func(c *jepsen.Config) {
			c.UnsafeNoLogFsync, c.LogStore = true, "boltdb" // an unsynced bbolt file goes back to empty
			c.Faults = []string{nemesis.PowerLossAll}
		},
		flagged: func(rep *jepsen.Report) (bool, string, []any) {
			dur, _ := rep.Result("durability")
			lin, _ := rep.Result("linearizable")
			return !dur.Valid || !lin.Valid, "durability or linearizability flags the lost writes: %s / %s", []any{dur.Line(), lin.Line()}
		},
	}, {
		title: "agents that start on a wiped data dir without asking the cluster, under disk losses (must fail disk)",
		dir:   "no-rejoin-check",
		most:  20 * time.Second,
		breakIt: func(c *jepsen.Config) {
			c.UnsafeSkipRejoinCheck = true
			c.Faults = []string{nemesis.DiskLoss}
		},
		flagged: func(rep *jepsen.Report) (bool, string, []any) {
			disk, _ := rep.Result("disk")
			return !disk.Valid, "disk flags the wiped node that came back under its old id: %s", []any{disk.Line()}
		},
	}}
}
