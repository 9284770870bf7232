package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/bench"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/version"
)

// benchFlags are the flags of `raftlock bench`.
type benchFlags struct {
	endpoints      string
	dev            bool
	dataDir        string
	logLevel       string
	duration       time.Duration
	warmup         time.Duration
	workload       string
	semaphoreLimit int
	clients        []int
	sessions       int
	locks          int
	waiters        int
	sessionTTL     time.Duration
	sessionWorkers int
	trials         int
	watchers       int
	watchChanges   int
	watchStale     bool
	watchModes     string
	watchPrefixes  int
	supervised     bool
	via            string
	jsonFile       string
	cpuProfile     string
	memProfile     string
	trace          string
	logStore       string
	tls            bool
	secure         bool
	token          string
	tlsFiles       clientFlags // --ca-file, --cert-file, --key-file with --endpoints
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a cluster: lock throughput and latency, contention, semaphores, read/write locks, sessions, failover",
		Long: `Run workloads against the cluster at --endpoints, or against a three-node cluster
started in this process with --dev, each for --duration after --warmup:

  uncontended  C clients (--clients, default 1,8,64) loop acquire+release on their own lock:
               ops/s, the servers' CPU per op, acquire/release latency p50/p99/max
  contended    C clients (--clients, default 8,64) block on one lock: grants/s, CPU per grant, handoff
               latency (release acknowledged -> next grant), fairness, FIFO; it checks that
               no two grants overlap and that tokens only grow, and fails if they do
  semaphore    C clients (default 8,64) on one semaphore of --semaphore-limit (default C/4, at
               least 2), each giving its permit back at once: grants/s, CPU per grant, wait;
               it checks that no more than the limit hold at once and fails if they do
  rwlock       C clients (default 8,64) on one read/write lock, an eighth of them writing:
               reads/s, writes/s, CPU per grant, read and write wait; it checks that a writer
               is always alone and fails if it is not
  sessions     --sessions sessions (TTL 10s) renewed at TTL/3: creation rate, renewals/s,
               lost sessions (must be 0), the leader's CPU and RSS from its /metrics
  failover     kill the leader (SIGKILL), time until an acquire succeeds, several trials;
               with --endpoints only when named (not by "all"), and the nodes must run on
               this machine: the bench finds the leader's process by its ports and starts it
               again after each trial with the same command line, directory and environment
               (--supervised: waits for a supervisor such as systemd to do that instead)
  state        builds a large state on three agent processes of this binary that it starts on
               127.0.0.1 (--sessions, default 10,000 here; --locks, default as many; --waiters,
               default a tenth of the locks) and reports memory per session, lock and waiter,
               a Raft snapshot and a backup with the longest stall of lock traffic during each,
               a fresh node's catch-up by snapshot, a start from disk and a restore. Only when
               named, and alone; --data-dir keeps the agents' data
  watch        --watchers prefix watches (default 1000) spread over the nodes, told of
               --watch-changes changes made one at a time: time from a change to the last
               watcher told, the servers' CPU per change and idle, each node's memory; every
               change must reach every watcher, in order. Measured with streams (Server-Sent
               Events; --watch-prefixes prefixes each, and another client's acquire rate
               before and with the streams idle) and with polls (--watch-mode to choose).
               Only when named (not by "all"): 10,000 watchers need the nodes'
               --max-connections raised

A live progress line is shown when stdout is a terminal; the figures end in a table, and
--json FILE writes them with the environment. With --dev every node and the bench share one
process, so CPU and RSS figures are of all of them. Exit status 1 on a violation.

A cluster with ACLs (--acl) needs --token (or $RAFTLOCK_TOKEN): a token with write on
"bench/" and operator:read (it finds the leader with GET /v1/cluster); /metrics needs none.
--dev --secure measures a cluster with TLS and ACLs, as raftlock dev --secure runs it,
with its management token.`,
		Example: `  raftlock bench --dev --workload all --duration 10s
  raftlock bench --endpoints http://10.0.0.1:7001,http://10.0.0.2:7001 --workload uncontended --clients 64
  raftlock bench --dev --workload sessions --sessions 100000 --json sessions.json
  raftlock bench --endpoints http://127.0.0.1:17001 --workload watch --watchers 10000
  raftlock bench --workload state --sessions 1000000 --json state.json
  raftlock bench --endpoints http://127.0.0.1:17001 --workload watch --watch-mode stream --watchers 1000 --watch-prefixes 100
  raftlock bench --dev --tls --workload uncontended   # with TLS: compare with the same run without --tls
  raftlock bench --dev --secure --workload uncontended   # TLS and ACLs
  raftlock bench --endpoints https://10.0.0.1:7001 --ca-file ca.pem --cert-file c.pem --key-file c-key.pem --token $SECRET`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.Context(), cmd, &f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.endpoints, "endpoints", "",
		"comma-separated HTTP endpoints of the cluster (default $"+endpointsEnv+", else "+defaultEndpoints+")")
	fl.BoolVar(&f.dev, "dev", false, "start a three-node cluster in this process (random ports) and measure it")
	fl.StringVar(&f.dataDir, "data-dir", "", "with --dev or --workload state: keep the nodes' data here (default: a temporary directory)")
	fl.StringVar(&f.logStore, "log-store", "", "with --dev: the nodes' Raft log store, wal or boltdb (default wal)")
	fl.BoolVar(&f.tls, "tls", false, "with --dev: run the cluster with TLS (HTTPS with client certificates, Raft over mutual TLS), as raftlock dev --tls does")
	fl.BoolVar(&f.secure, "secure", false, "with --dev: --tls and ACLs (--acl), measured with the cluster's management token, as raftlock dev --secure runs it")
	fl.StringVar(&f.token, "token", "", "ACL token secret sent with every request (default $"+tokenEnv+")")
	f.tlsFiles.registerTLS(cmd)
	fl.StringVar(&f.logLevel, "log-level", "off", "with --dev: log level of the nodes (off, error, warn, info, debug, trace)")
	fl.DurationVar(&f.duration, "duration", 10*time.Second, "measurement time of each workload")
	fl.DurationVar(&f.warmup, "warmup", 2*time.Second, "warm-up before each measurement")
	fl.StringVar(&f.workload, "workload", "all", "comma-separated: uncontended, contended, semaphore, rwlock, sessions, failover, watch, or all (all but watch)")
	fl.IntSliceVar(&f.clients, "clients", nil, "client counts of the lock workloads (default 1,8,64 uncontended; 8,64 contended, semaphore and rwlock)")
	fl.IntVar(&f.semaphoreLimit, "semaphore-limit", 0, "limit of the semaphore workload's semaphore (default a quarter of the clients, at least 2)")
	fl.IntVar(&f.sessions, "sessions", 10_000, "sessions of the sessions and state workloads")
	fl.IntVar(&f.locks, "locks", 0, "held locks of the state workload (default --sessions)")
	fl.IntVar(&f.waiters, "waiters", 0, "queued acquires of the state workload (default a tenth of --locks)")
	fl.DurationVar(&f.sessionTTL, "session-ttl", 10*time.Second, "TTL of the sessions of the sessions workload")
	fl.IntVar(&f.sessionWorkers, "session-workers", 4, "goroutines that renew the sessions, each in batches")
	fl.IntVar(&f.trials, "failover-trials", 5, "leader kills of the failover workload")
	fl.IntVar(&f.watchers, "watchers", 1000, "prefix watches of the watch workload, spread over the nodes")
	fl.IntVar(&f.watchChanges, "watch-changes", 20, "changes the watch workload makes, one at a time")
	fl.BoolVar(&f.watchStale, "watch-stale", false, "watch workload: stale watches, each answered by the node it is sent to (default: linearizable, forwarded to the leader)")
	fl.StringVar(&f.watchModes, "watch-mode", "stream,poll", "watch workload: comma-separated, how the watchers watch, each measured in turn: stream (Server-Sent Events) and/or poll (blocking queries)")
	fl.IntVar(&f.watchPrefixes, "watch-prefixes", 1, "watch workload: prefixes each stream watches (POST /v1/watch); watchings = watchers x prefixes")
	fl.BoolVar(&f.supervised, "supervised", false, "failover with --endpoints: a supervisor restarts killed nodes; wait for it instead of restarting them")
	fl.StringVar(&f.via, "via", bench.ViaLeader, "send requests first to: leader, follower (stays there: measures forwarding) or given (endpoint order, then the leader once known, as any Go client)")
	fl.StringVar(&f.jsonFile, "json", "", "also write the figures and the environment as JSON to this file")
	fl.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (with --dev: servers and bench) to this file")
	fl.StringVar(&f.memProfile, "memprofile", "", "write an allocation profile of this process to this file at the end")
	fl.StringVar(&f.trace, "trace", "", "write a runtime execution trace of this process to this file (go tool trace)")
	_ = fl.MarkHidden("cpuprofile")
	_ = fl.MarkHidden("memprofile")
	_ = fl.MarkHidden("trace")
	_ = fl.MarkHidden("session-workers")
	return cmd
}

func runBench(ctx context.Context, cmd *cobra.Command, f *benchFlags) error {
	if strings.EqualFold(strings.TrimSpace(f.workload), bench.State) {
		return runStateBench(ctx, cmd, f)
	}
	workloads, err := bench.ParseWorkloads(f.workload)
	if err != nil {
		return &exitError{code: exitFailure, msg: err.Error()}
	}
	opts := bench.Options{
		Endpoints:      benchEndpoints(f.endpoints),
		Duration:       f.duration,
		Warmup:         f.warmup,
		Workloads:      workloads,
		Sessions:       f.sessions,
		SessionTTL:     f.sessionTTL,
		SessionWorkers: f.sessionWorkers,
		FailoverTrials: f.trials,
		Watchers:       f.watchers,
		WatchChanges:   f.watchChanges,
		WatchStale:     f.watchStale,
		WatchModes:     strings.Split(strings.ReplaceAll(f.watchModes, " ", ""), ","),
		WatchPrefixes:  f.watchPrefixes,
		Supervised:     f.supervised,
		// Killing the processes of a cluster it did not start needs asking by name, not "all".
		KillProcesses: strings.Contains(strings.ToLower(f.workload), bench.Failover),
		Via:           f.via,
		Version:       version.Version,
		Token:         aclToken(f.token),
	}
	if opts.TLS, err = f.tlsFiles.tlsConfig(); err != nil {
		return &exitError{code: exitFailure, msg: err.Error()}
	}
	if f.warmup == 0 {
		opts.Warmup = -1 // zero means the default to bench.Options
	}
	if cmd.Flags().Changed("clients") {
		opts.UncontendedClients, opts.ContendedClients, opts.KindClients = f.clients, f.clients, f.clients
	}
	opts.SemaphoreLimit = f.semaphoreLimit
	out := cmd.OutOrStdout()
	if f.dev {
		log := newLogger(cmd.ErrOrStderr(), f.logLevel, "text")
		devOpts := agent.DevOptions{DataDir: f.dataDir, LogStore: f.logStore, Logger: log, TLS: f.tls || f.secure, ACL: f.secure}
		if devOpts.TLS {
			devOpts.Tune = func(c *config.Config) { c.TLSVerifyClients = true }
		}
		dev, err := agent.StartDev(ctx, devOpts)
		if err != nil {
			return fmt.Errorf("bench: starting the dev cluster: %w", err)
		}
		defer dev.Close()
		opts.Dev, opts.Endpoints = dev, dev.Endpoints()
		if files, ok := dev.TLSFiles(); ok {
			c := clientFlags{caFile: files.CAFile, certFile: files.ClientCertFile, keyFile: files.ClientKeyFile}
			if opts.TLS, err = c.tlsConfig(); err != nil {
				return err
			}
		}
		if f.secure {
			opts.Token = dev.ManagementToken()
		}
	}
	if isTerminal(out) {
		opts.Progress = func(line string) { fmt.Fprintf(out, "\r\033[K%s", line) }
	}
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	if f.memProfile != "" {
		defer writeAllocProfile(f.memProfile, cmd.ErrOrStderr())
	}
	if f.trace != "" {
		stop, err := startTrace(f.trace)
		if err != nil {
			return err
		}
		defer stop()
	}
	rep, runErr := bench.Run(ctx, opts)
	if rep != nil {
		if err := rep.WriteTable(out); err != nil {
			return err
		}
		if f.jsonFile != "" {
			if err := writeReportFile(f.jsonFile, rep); err != nil {
				return err
			}
		}
	}
	if errors.Is(runErr, bench.ErrViolation) {
		return &exitError{code: exitFailure, msg: "the run saw violations (listed above)"}
	}
	return runErr
}

// runStateBench runs the state workload on agents of this very binary.
func runStateBench(ctx context.Context, cmd *cobra.Command, f *benchFlags) error {
	bin, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: state: this binary: %w", err)
	}
	opts := bench.StateOptions{Binary: bin, Dir: f.dataDir, Sessions: f.sessions, Locks: f.locks,
		Waiters: f.waiters, LogStore: f.logStore}
	out := cmd.OutOrStdout()
	if isTerminal(out) {
		opts.Progress = func(line string) { fmt.Fprintf(out, "\r\033[K%s", line) }
	} else {
		opts.Progress = func(line string) { fmt.Fprintln(cmd.ErrOrStderr(), line) }
	}
	rep, runErr := bench.RunState(ctx, opts)
	if opts.Progress != nil && isTerminal(out) {
		fmt.Fprint(out, "\r\033[K")
	}
	if rep != nil {
		if err := rep.WriteTable(out); err != nil {
			return err
		}
		if f.jsonFile != "" {
			if err := writeJSONFile(f.jsonFile, rep); err != nil {
				return err
			}
		}
	}
	return runErr
}

// writeJSONFile writes v as indented JSON to path.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// benchEndpoints resolves --endpoints, then $RAFTLOCK_ENDPOINTS, then the dev cluster's.
func benchEndpoints(flag string) []string {
	v := flag
	if v == "" {
		v = os.Getenv(endpointsEnv)
	}
	if v == "" {
		v = defaultEndpoints
	}
	return strings.Split(v, ",")
}

// isTerminal reports whether w is a character device, so a progress line can redraw itself.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// startCPUProfile profiles this process into path until the returned function is called.
func startCPUProfile(path string) (stop func(), err error) {
	pf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		pf.Close()
	}, nil
}

// writeAllocProfile writes the allocations since the start of this process to path; `go tool
// pprof -sample_index=alloc_space` shows what the request path allocates.
func writeAllocProfile(path string, errOut io.Writer) {
	pf, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(pf, 0)
		if cerr := pf.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(errOut, "bench: allocation profile: %v\n", err)
	}
}

// startTrace writes an execution trace of this process to path until the returned function is
// called; `go tool trace -pprof=syscall` then shows where time blocks in system calls (fsync).
func startTrace(path string) (stop func(), err error) {
	tf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: trace: %w", err)
	}
	if err := trace.Start(tf); err != nil {
		tf.Close()
		return nil, fmt.Errorf("bench: trace: %w", err)
	}
	return func() {
		trace.Stop()
		tf.Close()
	}, nil
}

func writeReportFile(path string, rep *bench.Report) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := rep.WriteJSON(fh); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}
