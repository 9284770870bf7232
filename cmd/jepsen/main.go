// Command jepsen runs raftlock under injected faults and checks the recorded history.
//
//	go run ./cmd/jepsen --nodes 5 --time 30m --nemesis all
//	go run ./cmd/jepsen --nemesis all --old-binary /tmp/raftlock-old   # upgrade too
//
// --nemesis all includes the upgrade fault only with --old-binary (a build of an earlier
// commit, which the nodes start on), and the disk faults only where FUSE works.
//
// It prints the seed and configuration, the operation counts, the nemesis log, one line per
// checker with its figures, the artifact paths, and last "N passed, M failed". The exit status
// is 0 when every checker passed, 1 on any violation and 2 when the run could not be carried
// out. --self-test instead proves the checkers bite: every synthetic broken history must be
// flagged, a run against a resource that ignores tokens must fail fencing, and a run whose
// Go-client workers ignore Done must fail belief, and (where FUSE works) a run whose agents skip
// the Raft log's fsync must fail durability or linearizability under power losses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/jepsen"
	"github.com/raftlock/raftlock/jepsen/faultfs"
	"github.com/raftlock/raftlock/jepsen/nemesis"
)

// Exit statuses.
const (
	exitOK        = 0
	exitViolation = 1
	exitError     = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command-line settings beyond jepsen.Config.
type options struct {
	cfg      jepsen.Config
	faults   string
	selfTest bool
	check    string
}

func parse(args []string, stderr io.Writer) (options, error) {
	d := jepsen.DefaultConfig()
	o := options{cfg: d}
	fs := flag.NewFlagSet("jepsen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.cfg.Nodes, "nodes", d.Nodes, "cluster size")
	fs.DurationVar(&o.cfg.Time, "time", d.Time, "how long the workload runs under faults")
	fs.StringVar(&o.faults, "nemesis", "all", "faults: all, none, or a list of "+strings.Join(nemesis.All, ",")+
		" (all includes upgrade only with --old-binary, and the disk faults only where FUSE works)")
	fs.Int64Var(&o.cfg.Seed, "seed", 0, "random seed (0: derive one from the clock; it is printed)")
	fs.IntVar(&o.cfg.Workers, "workers", d.Workers, "concurrent clients, each with its own session")
	fs.IntVar(&o.cfg.Locks, "locks", d.Locks, "number of locks the clients contend for")
	fs.DurationVar(&o.cfg.TTL, "ttl", d.TTL, "session TTL (at least 2s)")
	fs.DurationVar(&o.cfg.LockDelay, "lock-delay", d.LockDelay, "lock-delay of half the workers' sessions (0 for none)")
	fs.Float64Var(&o.cfg.CrashRatio, "crash-ratio", d.CrashRatio, "probability that a worker crashes as it is granted a lock, leaving its session to expire")
	fs.DurationVar(&o.cfg.ClockSkew, "clock-skew", d.ClockSkew, "set the nodes' wall clocks this far apart, one from the next (0: true time)")
	fs.DurationVar(&o.cfg.Quiet, "quiet", d.Quiet, "mean quiet time between faults")
	fs.DurationVar(&o.cfg.ElectionTimeout, "election-timeout", d.ElectionTimeout, "agents' Raft election timeout")
	fs.DurationVar(&o.cfg.HeartbeatTimeout, "heartbeat-timeout", d.HeartbeatTimeout, "agents' Raft heartbeat timeout")
	fs.DurationVar(&o.cfg.LeaderLeaseTimeout, "leader-lease-timeout", d.LeaderLeaseTimeout, "agents' Raft leader lease timeout")
	fs.DurationVar(&o.cfg.OpTimeout, "op-timeout", d.OpTimeout, "client timeout of a request that does not wait")
	fs.StringVar(&o.cfg.Dir, "dir", "", "artifact directory (default: a new temporary directory)")
	fs.StringVar(&o.cfg.Binary, "binary", "", "prebuilt raftlock binary (default: go build ./cmd/raftlock)")
	fs.StringVar(&o.cfg.OldBinary, "old-binary", "", "a build of an earlier raftlock commit, for the upgrade fault: the nodes start on it and are rolled to the new build and back where allowed (needed by upgrade; without it, all leaves upgrade out)")
	fs.StringVar(&o.cfg.LogLevel, "log-level", d.LogLevel, "agents' log level")
	fs.StringVar(&o.cfg.LogStore, "log-store", "", "agents' Raft log store: wal or boltdb (default: the agent's, wal)")
	fs.Uint64Var(&o.cfg.SnapshotEvery, "snapshot-every", 0, "agents snapshot after this many log entries and keep as many behind it, so lagging nodes install snapshots (0: agents' defaults)")
	fs.DurationVar(&o.cfg.CheckTimeout, "check-timeout", 0, "bound on the linearizability search (0: 5m); running out is a failure")
	fs.StringVar(&o.cfg.Workload, "workload", d.Workload, "how workers hold locks: raw (HTTP requests, each recorded), client (the Go client: Session, Mutex, Election), or all (half each)")
	fs.IntVar(&o.cfg.Watchers, "watchers", d.Watchers, "prefix watchers of every lock, in turn raw linearizable and raw stale long polls, Go-client WatchPrefix (a stream) and raw streams; every acknowledged change must reach each, in order")
	fs.IntVar(&o.cfg.Cyclers, "cyclers", d.Cyclers, "how many of the Go-client workers keep one session for hundreds of fast Lock/Unlock cycles (-1: a quarter of them, at least one)")
	fs.IntVar(&o.cfg.SemaphoreWorkers, "semaphore-workers", 3, "Go-client workers on a semaphore (jepsen-semaphore), beside the others (0: none)")
	fs.IntVar(&o.cfg.SemaphoreLimit, "semaphore-limit", d.SemaphoreLimit, "the semaphore's limit")
	fs.IntVar(&o.cfg.RWWorkers, "rw-workers", 3, "Go-client workers on a read/write lock (jepsen-rwlock), beside the others (0: none)")
	fs.Float64Var(&o.cfg.StaleRatio, "stale-ratio", d.StaleRatio, "probability that a semaphore or read/write-lock holder pauses past its hold, then uses the resource under its old token")
	fs.BoolVar(&o.cfg.IgnoreTokens, "ignore-tokens", false, "the resource accepts stale tokens (must make fencing fail)")
	fs.BoolVar(&o.cfg.Secure, "secure", false, "run the agents with TLS (API and Raft, a CA made for the run) and --acl, each worker with a token of its own")
	fs.BoolVar(&o.cfg.DropWatchChanges, "drop-watch-changes", false, "watchers leave one change in seven out of the history (must make watch fail)")
	fs.BoolVar(&o.cfg.IgnoreStreamEnd, "ignore-stream-end", false, "streamed watchers ignore their stream's end and stay silent, as one kept on a cut-off follower would (must make watch fail under partitions)")
	fs.BoolVar(&o.cfg.IgnoreDone, "ignore-done", false, "client workers ignore Done: they go on believing they hold a lock after their session is gone (must make belief fail)")
	fs.BoolVar(&o.selfTest, "self-test", false, "prove that the checkers flag broken histories, then exit")
	fs.StringVar(&o.check, "check", "", "re-check a recorded history.jsonl instead of running (uses --ttl, --lock-delay and --election-timeout)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	var err error
	if o.cfg.Faults, err = nemesis.ParseFaults(o.faults); err != nil {
		return o, err
	}
	if o.cfg.OldBinary != "" {
		if _, err := os.Stat(o.cfg.OldBinary); err != nil {
			return o, fmt.Errorf("--old-binary: %w", err)
		}
	}
	if slices.Contains(o.cfg.Faults, nemesis.Upgrade) && o.cfg.OldBinary == "" && o.check == "" {
		if strings.TrimSpace(o.faults) != "all" {
			return o, fmt.Errorf("the %s fault needs --old-binary, a build of an earlier raftlock", nemesis.Upgrade)
		}
		o.cfg.Faults = nemesis.Without(o.cfg.Faults, nemesis.Upgrade)
		fmt.Fprintf(stderr, "jepsen: no --old-binary: --nemesis all leaves out %s\n", nemesis.Upgrade)
	}
	if nemesis.NeedsDisk(o.cfg.Faults) && o.check == "" {
		if ferr := faultfs.Available(); ferr != nil {
			if strings.TrimSpace(o.faults) != "all" {
				return o, fmt.Errorf("the disk faults (%s) need FUSE, which is not available here: %w", strings.Join(nemesis.Disk, ", "), ferr)
			}
			o.cfg.Faults = nemesis.WithoutDisk(o.cfg.Faults)
			fmt.Fprintf(stderr, "jepsen: FUSE is not available here (%v): --nemesis all leaves out the disk faults %s\n", ferr, strings.Join(nemesis.Disk, ", "))
		}
	}
	if o.cfg.Seed == 0 {
		o.cfg.Seed = time.Now().UnixNano() % 1_000_000_007
	}
	if o.cfg.Dir == "" && o.check == "" {
		if o.cfg.Dir, err = os.MkdirTemp("", "raftlock-jepsen-"); err != nil {
			return o, err
		}
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return exitError
	}
	o.cfg.Out = stdout
	if o.selfTest {
		return selfTest(ctx, o.cfg, stdout, stderr)
	}
	if o.check != "" {
		return recheck(o.cfg, o.check, stdout, stderr)
	}
	rep, err := jepsen.Run(ctx, o.cfg)
	if err != nil {
		fmt.Fprintln(stderr, "jepsen:", err)
		return exitError
	}
	rep.Print(stdout)
	if !rep.Valid() {
		return exitViolation
	}
	return exitOK
}
