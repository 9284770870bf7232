package jepsen

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/faultfs"
	"github.com/raftlock/raftlock/jepsen/history"
	"github.com/raftlock/raftlock/jepsen/nemesis"
)

// scenario is one short end-to-end run with a fixed seed.
type scenario struct {
	name   string
	tweak  func(*Config)
	expect func(t *testing.T, rep *Report, ops []history.Op)
}

// scenarioTime is how long each scenario's workload runs under faults.
const scenarioTime = 25 * time.Second

// kindsTime is how long the semaphore scenario runs, and rwTime the read/write-lock one:
// longer than a writer's wait, the liveness bound (14s without lock-delays).
const (
	kindsTime = 15 * time.Second
	rwTime    = 20 * time.Second
)

// restoreTime is how long the restore scenarios run: one or two saves and restores.
const restoreTime = 15 * time.Second

// selfTestTime is how long the self-tests run: long enough for a few client pauses.
const selfTestTime = 20 * time.Second

// watchSelfTestTime is how long the watch self-test runs: enough changes for some to be missed.
const watchSelfTestTime = 8 * time.Second

// powerSelfTestTime is how long the no-fsync self-test runs: two or three power cuts.
const powerSelfTestTime = 12 * time.Second

// operatorTime is how long the membership and upgrade scenarios run: one fault each, which
// runs to its end past the workload's time.
const operatorTime = 12 * time.Second

// concurrentScenarios bounds how many clusters run at once on a 2-core CI machine.
const concurrentScenarios = 2

func scenarios() []scenario {
	return []scenario{
		{"kill", func(c *Config) { c.Faults, c.Seed = []string{nemesis.Kill}, 11 }, expectFault(nemesis.Kill)},
		{"leader-pause", func(c *Config) {
			c.Faults, c.Seed, c.TargetLeader = []string{nemesis.Pause}, 12, true
		}, expectFault(nemesis.Pause)},
		// Partitions on a secure cluster: TLS for the API and Raft, --acl, every worker, probe and
		// observer with a token of its own, through proxies that cut TLS connections too.
		{"partition-secure", func(c *Config) { c.Faults, c.Seed, c.Secure = []string{nemesis.Partition}, 13, true },
			func(t *testing.T, rep *Report, ops []history.Op) {
				expectFault(nemesis.Partition)(t, rep, ops)
				refused := 0
				for _, op := range ops {
					if op.Status == 401 || op.Status == 403 {
						refused++
					}
				}
				if refused > 0 {
					t.Errorf("%d requests of the workers were refused by the ACLs", refused)
				}
			}},
		// Graceful restarts: leadership transfer, a snapshot at shutdown, a start from it.
		{"restart", func(c *Config) { c.Faults, c.Seed = []string{nemesis.Restart}, 17 }, expectFault(nemesis.Restart)},
		// The whole cluster stopped at once and started again: leadership handed to nodes that
		// are stopping themselves, and no node that stayed up to catch the others up.
		{"restart-all", func(c *Config) { c.Faults, c.Seed = []string{nemesis.RestartAll}, 18 }, expectFault(nemesis.RestartAll)},
		// The other scenarios run the default store, raft-wal (whose restart after a truncated
		// log tail is what v0.4.0 got wrong); raft-boltdb stays supported, so it gets crashes,
		// partitions and snapshots every 8 entries too. Only raft-boltdb shows a snapshot being
		// installed in a short run: raft-wal keeps serving compacted entries while they are in its
		// open segment (64 MiB), so a follower that fell behind catches up from the log instead.
		{"boltdb-snapshots", func(c *Config) {
			c.Faults, c.Seed, c.LogStore, c.SnapshotEvery = []string{nemesis.Kill, nemesis.Partition}, 16, "boltdb", 8
		}, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.Kill)(t, rep, ops)
			expectFault(nemesis.Partition)(t, rep, ops)
			expectSnapshots(t, rep, true)
		}},
		// Snapshots every 8 entries on raft-wal under crashes and partitions: taken while
		// commands apply, restored by restarted nodes, which then keep serving from them.
		{"snapshots", func(c *Config) {
			c.Faults, c.Seed, c.SnapshotEvery = []string{nemesis.Kill, nemesis.Partition}, 20, 8
		}, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.Kill)(t, rep, ops)
			expectFault(nemesis.Partition)(t, rep, ops)
			expectSnapshots(t, rep, false)
		}},
		// Holders crash and leave their sessions to expire; while a lock-delay is in force,
		// leadership moves to a node whose clock is 10s off (the default skew): the delay must
		// last across it. A build whose new leader ended delays by its wall clock failed here in
		// two of three runs. Only the raw half of the workers' holders are judged by expiry, so
		// they crash twice as often as the 5% that was enough when all workers were raw.
		{"crash-clock", func(c *Config) {
			c.Faults, c.Seed, c.CrashRatio, c.LockDelay = []string{nemesis.Clock}, 19, 0.1, 3*time.Second
		}, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.Clock)(t, rep, ops)
			expectDelayedHandoffs(t, rep, "crashed holders")
		}},
		// The Go-client workers' acquires delayed and duplicated on their way to the nodes (held
		// back, or delivered with the answer lost and again later), while half of them cycle
		// Lock/Unlock hundreds of times on one session each (on four locks, so that a cycler
		// stays away from each for seconds): a late request of an attempt that ended must be
		// refused. It failed (held-by-nobody) when a session remembered only its last 16
		// cancelled attempts: a late request of an earlier one took a lock that no Mutex of the
		// session held. Sessions number their attempts now, and forget none.
		{"delay-dup", func(c *Config) {
			c.Faults, c.Seed, c.Workload, c.Cyclers, c.Locks = []string{nemesis.DelayDup}, 22, WorkloadClient, 4, 4
		}, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.DelayDup)(t, rep, ops)
			expectLateRequests(t, ops)
		}},
		// A node whose data dir is wiped and that is started again with its usual flags must
		// refuse to start under its old id, saying why; the nemesis then removes it and joins
		// it again as a new member. Before the refusal, it served as a voter that forgot its
		// votes (self-test-no-rejoin-check below).
		{"disk-loss", func(c *Config) { c.Faults, c.Seed, c.Time = []string{nemesis.DiskLoss}, 31, 10*time.Second }, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.DiskLoss)(t, rep, ops)
			if d, _ := rep.Result("disk"); !strings.Contains(d.Figures, "refused") || strings.Contains(d.Figures, "(0 wiped nodes refused") {
				t.Errorf("want a wiped node refused: %s", d.Line())
			}
		}},
		// Power cuts of a minority and of every node, a node whose fsync fails (it must stop and
		// say why), a slow leader disk and a full one, on faultfs (needs FUSE; skipped without).
		// Every acknowledged grant, release and session must survive each cut.
		{"power", func(c *Config) {
			c.Faults, c.Seed = []string{nemesis.PowerLossAll, nemesis.PowerLoss, nemesis.DiskEIO, nemesis.DiskSlow, nemesis.DiskFull}, 24
		}, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.PowerLossAll)(t, rep, ops)
			expectFault(nemesis.DiskEIO)(t, rep, ops)
			if d, _ := rep.Result("durability"); !strings.Contains(d.Figures, "power losses") {
				t.Errorf("durability must check the state after each power loss: %s", d.Line())
			}
		}},
		// A semaphore of 2 held by five Go-client workers, beside two of the usual workers,
		// under leader crashes and partitions: at most two permits believed and two writers
		// accepted at once, and the stale writes of holders that paused past their hold refused.
		{"semaphore", func(c *Config) {
			c.Faults, c.Seed, c.Time, c.Workers = []string{nemesis.Kill, nemesis.Partition}, 25, kindsTime, 2
			c.SemaphoreWorkers, c.StaleRatio = 5, 0.1
		}, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.Kill)(t, rep, ops)
			expectKinds(t, rep, "semaphore")
		}},
		// A read/write lock held by a writer and four readers (Go-client workers) whose holds
		// overlap, while their acquires (and the other client workers') are delayed and
		// duplicated: no writer beside another holder, and no writer starved (delay-dup is no
		// cluster fault, so every writer's wait is judged; the run outlasts the bound); a lock
		// that let readers overtake a waiting writer starved it here.
		{"rwlock", func(c *Config) {
			c.Faults, c.Seed, c.Time, c.Workers, c.Workload = []string{nemesis.DelayDup}, 26, rwTime, 2, WorkloadClient
			c.RWWorkers, c.StaleRatio, c.LockDelay = 5, 0.1, 0
		}, func(t *testing.T, rep *Report, ops []history.Op) {
			expectFault(nemesis.DelayDup)(t, rep, ops)
			expectKinds(t, rep, "rwlock")
		}},
		// Backups saved during the run and restored later (with the management token, acl=keep),
		// under both workloads: every checker passes, since a restore ends every session and
		// holds back what was held.
		{"restore-secure", func(c *Config) { c.Faults, c.Seed, c.Time, c.Secure = []string{nemesis.Restore}, 27, restoreTime, true },
			func(t *testing.T, rep *Report, ops []history.Op) {
				expectFault(nemesis.Restore)(t, rep, ops)
				restored := 0
				for _, op := range ops {
					if op.Kind == history.Nemesis && op.Fault == nemesis.Restore && op.Action == history.ActionStop && op.Type == history.OK {
						restored++
					}
				}
				if restored == 0 {
					t.Errorf("no restore succeeded")
				}
				for _, name := range []string{"belief", "held-by-nobody"} {
					r, _ := rep.Result(name)
					t.Log(r.Line())
				}
			}},
		// The operator's actions while the workload runs: the spare added as a non-voter and
		// promoted once caught up, a voter (the leader a third of the time) removed and replaced
		// by a new node at the same addresses (an empty data dir and --join), leadership moved,
		// the spare removed again. Every step must succeed and every checker pass.
		{"membership", func(c *Config) { c.Faults, c.Seed, c.Time = []string{nemesis.Membership}, 33, operatorTime },
			func(t *testing.T, rep *Report, ops []history.Op) {
				expectFault(nemesis.Membership)(t, rep, ops)
				o, _ := rep.Result("operator")
				t.Log(o.Line())
				var steps []string
				for _, op := range ops {
					if op.Kind == history.Nemesis && op.Fault == nemesis.Membership && op.Action == history.ActionEvent && op.Type == history.OK {
						steps = append(steps, op.Detail)
					}
				}
				all := strings.Join(steps, "\n")
				for _, want := range []string{"as a non-voter", "promoted", "replaced", "leadership transferred", "removed n4"} {
					if !strings.Contains(all, want) {
						t.Errorf("no membership step %q succeeded; steps:\n%s", want, all)
					}
				}
			}},
		{"client-pause", func(c *Config) { c.Faults, c.Seed = []string{nemesis.ClientPause}, 14 },
			func(t *testing.T, rep *Report, ops []history.Op) {
				expectFault(nemesis.ClientPause)(t, rep, ops)
				f, _ := rep.Result("fencing")
				if !strings.Contains(f.Figures, " stale rejected") || strings.Contains(f.Figures, " 0 stale rejected") {
					t.Errorf("client pauses must make the resource reject stale writes: %s", f.Line())
				}
				expectDelayedHandoffs(t, rep, "client pauses")
			}},
	}
}

// expectFault requires every checker to pass and the fault to have been injected.
func expectFault(fault string) func(*testing.T, *Report, []history.Op) {
	return func(t *testing.T, rep *Report, ops []history.Op) {
		t.Helper()
		if !rep.Valid() {
			t.Errorf("checkers failed (%d passed, %d failed)", rep.Passed, rep.Failed)
		}
		if countFault(ops, fault) == 0 {
			t.Errorf("the %s fault was never injected", fault)
		}
	}
}

// expectKinds requires the checker (semaphore or rwlock) to have judged holds (of both modes,
// for a read/write lock) and a holder that paused past its hold.
func expectKinds(t *testing.T, rep *Report, checker string) {
	t.Helper()
	r, _ := rep.Result(checker)
	t.Log(r.Line())
	var a, b, paused int
	if checker == "semaphore" {
		fmt.Sscanf(r.Figures, "%d permits believed", &a)
		b = a
	} else {
		fmt.Sscanf(r.Figures, "%d shared and %d exclusive", &a, &b)
	}
	fmt.Sscanf(r.Figures[strings.LastIndex(r.Figures, "; ")+2:], "%d holders paused", &paused)
	if a == 0 || b == 0 || paused == 0 {
		t.Errorf("want holds judged (of both modes) and a holder paused past its hold: %s", r.Line())
	}
}

// expectLateRequests requires the delay-dup fault to have delivered requests late, and a
// client session to have settled more Lock/Unlock cycles than the 16 cancelled attempts the
// state machine once remembered.
func expectLateRequests(t *testing.T, ops []history.Op) {
	t.Helper()
	var late int64
	cycles := map[string]int{}
	for _, op := range ops {
		var delayed, duplicated, n int64
		if op.Kind == history.Nemesis && op.Fault == nemesis.DelayDup && op.Action == history.ActionStop {
			if _, err := fmt.Sscanf(op.Detail, "requests delayed %d, duplicated %d; late deliveries %d", &delayed, &duplicated, &n); err != nil {
				t.Fatalf("delay-dup's stop does not give its counts: %v: %s", err, op)
			}
			late += n
		}
		if op.Kind == history.ClientRelease && op.Type == history.OK {
			cycles[op.Session]++
		}
	}
	most := 0
	for _, n := range cycles {
		most = max(most, n)
	}
	t.Logf("%d late requests; at most %d settled cycles on one client session", late, most)
	if late == 0 {
		t.Error("delay-dup delivered no request late")
	}
	if most <= 16 {
		t.Errorf("no client session went past 16 settled Lock/Unlock cycles (most: %d)", most)
	}
}

// expectDelayedHandoffs requires the expiry checker to have judged locks passing on by expiry,
// some of them after a lock-delay.
func expectDelayedHandoffs(t *testing.T, rep *Report, cause string) {
	t.Helper()
	e, _ := rep.Result("expiry")
	if strings.HasPrefix(e.Figures, "0 handoffs") || strings.Contains(e.Figures, " 0 of them after a lock-delay") {
		t.Errorf("%s must hand locks over by expiry, some after a lock-delay: %s", cause, e.Line())
	}
}

// expectSnapshots requires several snapshots taken and, when installed is set, one installed by
// a node that fell behind.
func expectSnapshots(t *testing.T, rep *Report, installed bool) {
	t.Helper()
	taken := countInLogs(t, rep.NodeLogs, "snapshot complete up to")
	inst := countInLogs(t, rep.NodeLogs, "Installed remote snapshot")
	t.Logf("%d snapshots taken, %d installed from a leader", taken, inst)
	if taken < 3 {
		t.Error("want several snapshots taken")
	}
	if installed && inst == 0 {
		t.Error("want a snapshot installed by a node that fell behind")
	}
}

// countInLogs counts the lines of the node logs that contain s.
func countInLogs(t *testing.T, paths []string, s string) int {
	t.Helper()
	n := 0
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n += bytes.Count(b, []byte(s))
	}
	return n
}

// runScenario runs one configuration and keeps its artifacts only if the test fails.
func runScenario(t *testing.T, ctx context.Context, binary string, tweak func(*Config)) (*Report, []history.Op) {
	t.Helper()
	dir, err := os.MkdirTemp("", "raftlock-jepsen-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("artifacts kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	cfg := DefaultConfig()
	cfg.Time, cfg.Binary, cfg.Dir = scenarioTime, binary, dir
	tweak(&cfg)
	var out bytes.Buffer
	cfg.Out = &out
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	rep.Print(&out)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("\n" + out.String())
		}
	})
	ops, err := history.ReadFile(rep.HistoryPath)
	if err != nil {
		t.Fatal(err)
	}
	return rep, ops
}

// oldFeatureDef is the line whose first appearance in fsm/features.go marks the commit that
// added the newest feature; the commit before it is the old build of the upgrade scenario.
const oldFeatureDef = `FeatureAttemptEnds Feature = "attempt-ends"`

// buildOldBinary builds raftlock as it was just before attempt-ends was added: it finds that
// commit in the repository's history, checks the one before it out into a temporary git
// worktree, builds it there and removes the worktree. It fails (never skips) when it cannot:
// the upgrade scenario needs a real earlier build, and CI clones the whole history.
func buildOldBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the upgrade scenario needs git and the repository's history to build an earlier raftlock: git %s: %v\n%s",
				strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	root := git(".", "rev-parse", "--show-toplevel")
	added := strings.Fields(git(root, "log", "--format=%H", "-S", oldFeatureDef, "--", "fsm/features.go"))
	if len(added) == 0 {
		t.Fatalf("the upgrade scenario needs the commit that added attempt-ends in the history (a shallow clone? run git fetch --unshallow)")
	}
	rev := added[len(added)-1] + "^"
	tmp := t.TempDir()
	wt := filepath.Join(tmp, "src")
	git(root, "worktree", "add", "--detach", wt, rev)
	defer git(root, "worktree", "remove", "--force", wt)
	out := filepath.Join(tmp, "raftlock-old")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/raftlock")
	cmd.Dir = wt
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build raftlock at %s: %v\n%s", rev, err, b)
	}
	t.Logf("old build: raftlock at %s (%s)", rev, git(root, "log", "-1", "--format=%h %s", rev))
	return out
}

// buildBinary compiles raftlock once for all scenarios.
func buildBinary(t *testing.T, ctx context.Context) string {
	t.Helper()
	bin, err := cluster.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestScenarios runs the short end-to-end scenarios against a real 3-node cluster, each with the
// default workload (half the workers raw, half through the Go client): kill, a leader paused
// longer than the TTL, partitions, graceful restarts, the wal store, snapshots every few
// entries, crashed holders and leaders with skewed clocks, client pauses, Go-client acquires
// delayed and duplicated while cyclers do hundreds of cycles per session (which fails until
// issue 32's defect 1 is fixed), the operator's membership changes, a rolling upgrade from
// the build before attempt-ends (built from a git worktree of that commit), and the self-tests
// in which the resource ignores tokens and fencing must fail, and in which Go-client workers
// ignore Done and belief must fail. Two clusters run at a time.
func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end runs take about 90 s; skipped with -short")
	}
	// The subtests are parallel: they run after this function returns, so the context ends in
	// a cleanup, which runs once they are all done.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	t.Cleanup(cancel)
	bin := buildBinary(t, ctx)
	sem := make(chan struct{}, concurrentScenarios)
	fuse := faultfs.Available()
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			var cfg Config
			sc.tweak(&cfg)
			if nemesis.NeedsDisk(cfg.Faults) && fuse != nil {
				t.Skipf("FUSE is not available here (%v): power losses and disk faults cannot run", fuse)
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			rep, ops := runScenario(t, ctx, bin, sc.tweak)
			sc.expect(t, rep, ops)
		})
	}
	// A rolling upgrade under load from a real earlier build (the commit before attempt-ends
	// was added, built from a git worktree): the nodes start on it, are rolled to this build one
	// at a time, one of them back to the old build and forward again before the last; the
	// newest features must stay off until the last node runs this build and then turn on, a
	// node started on the old build afterwards must refuse, and every checker must pass.
	t.Run("upgrade", func(t *testing.T) {
		t.Parallel()
		old := buildOldBinary(t, ctx)
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, ops := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.Time, c.OldBinary = []string{nemesis.Upgrade}, 34, operatorTime, old
		})
		expectFault(nemesis.Upgrade)(t, rep, ops)
		o, _ := rep.Result("operator")
		t.Log(o.Line())
		var newOnly, back, refused, enabled int
		for _, op := range ops {
			if op.Kind != history.Nemesis || op.Fault != nemesis.Upgrade || op.Type != history.OK {
				continue
			}
			switch {
			case strings.Contains(op.NewFeatures, "attempt-ends"):
				newOnly++
			case op.Build == history.BuildOld && strings.Contains(op.Detail, "new build → old build"):
				back++
			case strings.Contains(op.Detail, "on the old build after the new features were enabled: refused"):
				refused++
			case strings.Contains(op.Features, "attempt-ends"):
				enabled++
			}
		}
		if newOnly == 0 || back == 0 || refused == 0 || enabled == 0 {
			t.Errorf("want attempt-ends found only in the new build (%d), a node taken back to the old build before it was enabled (%d), "+
				"a downgrade refused after (%d) and attempt-ends enabled once every node ran the new build (%d)", newOnly, back, refused, enabled)
		}
	})
	t.Run("self-test-ignoring-tokens", func(t *testing.T) {
		t.Parallel()
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, _ := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.IgnoreTokens, c.Time = []string{nemesis.ClientPause}, 15, true, selfTestTime
		})
		f, _ := rep.Result("fencing")
		if f.Valid {
			t.Errorf("a resource that ignores tokens must fail fencing under client pauses: %s", f.Line())
		}
		for _, r := range rep.Results {
			if r.Name != "fencing" && !r.Valid {
				t.Errorf("only fencing may fail when the resource ignores tokens: %s", r.Line())
			}
		}
	})
	// Agents that do not fsync their log, under power losses of the whole cluster: durability
	// or linearizability must fail (the harness proves its power cuts bite). On raft-boltdb the
	// whole unsynced database goes back to empty and the nodes bootstrap anew, so the lost
	// writes show at once; raft-wal keeps its synced metadata, loses its segments and stalls,
	// which fails too but only after every wait of the run has timed out.
	t.Run("self-test-no-log-fsync", func(t *testing.T) {
		t.Parallel()
		if fuse != nil {
			t.Skipf("FUSE is not available here (%v): power losses cannot run", fuse)
		}
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, _ := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.UnsafeNoLogFsync, c.Time = []string{nemesis.PowerLossAll}, 23, true, powerSelfTestTime
			c.LogStore = "boltdb"
		})
		d, _ := rep.Result("durability")
		l, _ := rep.Result("linearizable")
		if d.Valid && l.Valid {
			t.Errorf("agents that skip the log's fsync must fail durability or linearizability under power-loss-all:\n%s\n%s", d.Line(), l.Line())
		}
	})
	// Agents that start on a wiped data dir without asking the cluster (the refusal switched
	// off), under disk losses: the wiped node comes back as a voter, and disk must fail.
	t.Run("self-test-no-rejoin-check", func(t *testing.T) {
		t.Parallel()
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, _ := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.UnsafeSkipRejoinCheck, c.Time = []string{nemesis.DiskLoss}, 32, true, watchSelfTestTime
		})
		if d, _ := rep.Result("disk"); d.Valid || !strings.Contains(strings.Join(d.Examples, "\n"), "forgot its votes") {
			t.Errorf("a wiped node that comes back under its old id must fail disk: %s", d)
		}
	})
	// Watchers that leave one change in seven out of the history, as a watcher that misses
	// changes would: the watch checker must flag them, and nothing else fail.
	t.Run("self-test-dropping-watch-changes", func(t *testing.T) {
		t.Parallel()
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, _ := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.DropWatchChanges, c.Time = nil, 25, true, watchSelfTestTime
		})
		w, _ := rep.Result("watch")
		if w.Valid || !strings.Contains(strings.Join(w.Examples, "\n"), "was never told") {
			t.Errorf("watchers that miss changes must fail watch: %s", w)
		}
		for _, r := range rep.Results {
			if r.Name != "watch" && !r.Valid {
				t.Errorf("only watch may fail when watchers miss changes: %s", r.Line())
			}
		}
	})
	// Streamed watchers that take no notice of their stream's end (a node cut off from its
	// leader ends its streams) and stay silent, as a watcher kept on a stale stream would:
	// under partitions the watch checker must flag them, and nothing else fail.
	t.Run("self-test-ignoring-stream-end", func(t *testing.T) {
		t.Parallel()
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, _ := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.IgnoreStreamEnd, c.Watchers, c.Time = []string{nemesis.Partition}, 36, true, 12, selfTestTime
		})
		w, _ := rep.Result("watch")
		if w.Valid || !strings.Contains(strings.Join(w.Examples, "\n"), "stayed silent") {
			t.Errorf("streamed watchers that ignore their stream's end must fail watch under partitions: %s", w)
		}
		for _, r := range rep.Results {
			if r.Name != "watch" && !r.Valid {
				t.Errorf("only watch may fail when streamed watchers ignore their stream's end: %s", r.Line())
			}
		}
	})
	// Agents whose restores keep the backup's sessions (as restores did before they ended
	// them): a lock taken after the backup goes to another worker while its holder still
	// believes, or a lock released after it comes back to a session that believes nothing.
	t.Run("self-test-restore-keeps-sessions", func(t *testing.T) {
		t.Parallel()
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, _ := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.Workload, c.UnsafeRestoreKeepsSessions, c.Time = []string{nemesis.Restore}, 28, WorkloadClient, true, restoreTime
		})
		b, _ := rep.Result("belief")
		h, _ := rep.Result("held-by-nobody")
		t.Log(b.Line())
		t.Log(h.Line())
		if b.Valid && h.Valid {
			t.Errorf("restores that keep the backup's sessions must fail belief or held-by-nobody:\n%s\n%s", b.Line(), h.Line())
		}
	})
	// Go-client workers that ignore Done go on believing they hold a lock while paused, after
	// their session expired and the lock went to another worker: belief must catch it.
	t.Run("self-test-ignoring-done", func(t *testing.T) {
		t.Parallel()
		sem <- struct{}{}
		defer func() { <-sem }()
		rep, _ := runScenario(t, ctx, bin, func(c *Config) {
			c.Faults, c.Seed, c.Workload, c.IgnoreDone, c.Time = []string{nemesis.ClientPause}, 21, WorkloadClient, true, selfTestTime
		})
		b, _ := rep.Result("belief")
		if b.Valid || !strings.Contains(strings.Join(b.Examples, "\n"), "two workers believed they held it at once") {
			t.Errorf("workers that ignore Done must fail belief with overlapping beliefs under client pauses: %s", b)
		}
		for _, r := range rep.Results {
			if r.Name != "belief" && !r.Valid {
				t.Errorf("only belief may fail when client workers ignore Done: %s", r.Line())
			}
		}
	})
}

// The short runs use checker settings that the lead's server must meet; keep them visible.
func TestCheckerConfigOfShortRuns(t *testing.T) {
	cc := DefaultConfig().CheckerConfig()
	want := checker.Config{TTL: 2 * time.Second, ClockRateError: 0.02, ExpiryBound: 2 * time.Second}
	if cc.TTL != want.TTL || cc.ClockRateError != want.ClockRateError || cc.ExpiryBound != want.ExpiryBound {
		t.Fatalf("checker config drifted: %+v", cc)
	}
	if cc.LivenessBound < cc.TTL+2*time.Second {
		t.Fatalf("liveness bound %s is shorter than a TTL plus an election", cc.LivenessBound)
	}
	if filepath.Base(DefaultConfig().LockNames()[0]) == "" {
		t.Fatal("lock names must be non-empty")
	}
}

// The checker names the faults it treats specially by string, since it does not import the
// nemesis; a renamed fault would silently escape those checks.
func TestCheckerKnowsTheNemesisFaultNames(t *testing.T) {
	for checkerName, nemesisName := range map[string]string{
		checker.FaultClientPause:  nemesis.ClientPause,
		checker.FaultRestart:      nemesis.Restart,
		checker.FaultRestartAll:   nemesis.RestartAll,
		checker.FaultPowerLoss:    nemesis.PowerLoss,
		checker.FaultPowerLossAll: nemesis.PowerLossAll,
		checker.FaultDiskEIO:      nemesis.DiskEIO,
		checker.FaultDiskFull:     nemesis.DiskFull,
		checker.FaultDiskSlow:     nemesis.DiskSlow,
		checker.FaultDiskLoss:     nemesis.DiskLoss,
		checker.FaultRestore:      nemesis.Restore,
		checker.FaultMembership:   nemesis.Membership,
		checker.FaultUpgrade:      nemesis.Upgrade,
	} {
		if checkerName != nemesisName {
			t.Errorf("checker calls a fault %q, the nemesis %q", checkerName, nemesisName)
		}
	}
}
