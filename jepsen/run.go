package jepsen

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
	"github.com/raftlock/raftlock/jepsen/nemesis"
	"github.com/raftlock/raftlock/jepsen/workload"
)

// Phase time limits around the workload.
const (
	startTimeout    = 60 * time.Second
	settleTimeout   = 60 * time.Second
	convergeTimeout = 30 * time.Second
	stopTimeout     = 15 * time.Second
)

// Run builds (unless cfg.Binary is set) and starts a cluster, runs the workload under the
// nemesis for cfg.Time, heals, probes liveness, reads every node's final state, stops the
// cluster and checks everything. The returned Report holds the verdicts; err is only for a
// run that could not be carried out. Every process Run starts is ended before it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("jepsen: %w", err)
	}
	rep := &Report{Config: cfg, HistoryPath: filepath.Join(cfg.Dir, "history.jsonl"),
		HTMLPath: filepath.Join(cfg.Dir, "linearizability.html")}
	fmt.Fprintf(out, "jepsen: seed %d\njepsen: config %s\njepsen: artifacts in %s\n", cfg.Seed, cfg, cfg.Dir)
	binary := cfg.Binary
	if binary == "" {
		fmt.Fprintf(out, "jepsen: building %s\n", cluster.MainPackage)
		var err error
		if binary, err = cluster.Build(ctx, filepath.Join(cfg.Dir, "bin")); err != nil {
			return nil, err
		}
	}
	hf, err := os.Create(rep.HistoryPath)
	if err != nil {
		return nil, fmt.Errorf("jepsen: %w", err)
	}
	defer hf.Close()
	rec := history.NewRecorder(hf)

	var startBinary string
	if slices.Contains(cfg.Faults, nemesis.Upgrade) {
		startBinary = cfg.OldBinary // the upgrade fault rolls the nodes from it to binary
		fmt.Fprintf(out, "jepsen: the nodes start on the old build %s\n", startBinary)
	}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	c, err := cluster.Start(sctx, cluster.Options{Binary: binary, StartBinary: startBinary, Dir: filepath.Join(cfg.Dir, "nodes"), Nodes: cfg.Nodes,
		LogLevel: cfg.LogLevel, HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout,
		LeaderLeaseTimeout: cfg.LeaderLeaseTimeout, ClockSkew: cfg.ClockSkew, ExtraArgs: agentArgs(cfg), Secure: cfg.Secure,
		FaultFS: nemesis.NeedsDisk(cfg.Faults)})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("jepsen: start cluster: %w", err)
	}
	defer func() {
		// A node or mount left behind would outlive the run (and leak its FUSE server).
		if err := c.Close(); err != nil {
			fmt.Fprintf(out, "jepsen: closing the cluster: %v\n", err)
		}
	}()
	for _, n := range c.Nodes {
		rep.NodeLogs = append(rep.NodeLogs, n.LogPath)
	}

	fmt.Fprintf(out, "jepsen: %d nodes ready\n", len(c.Nodes))

	wcfg := workloadConfig(cfg)
	if c.Secure() {
		wcfg.TLS, wcfg.Tokens = c.TLSConfig(), map[int]string{}
		if wcfg.ProxyTLS, err = c.ProxyTLS(); err != nil {
			return nil, fmt.Errorf("jepsen: %w", err)
		}
		tctx, cancel := context.WithTimeout(ctx, startTimeout)
		for _, p := range wcfg.Processes() {
			tok, err := c.NewToken(tctx, fmt.Sprintf("jepsen process %d", p))
			if err != nil {
				cancel()
				return nil, fmt.Errorf("jepsen: token of process %d: %w", p, err)
			}
			wcfg.Tokens[p] = tok
		}
		cancel()
		fmt.Fprintf(out, "jepsen: TLS and ACLs on; %d tokens, one per worker, probe and observer\n", len(wcfg.Tokens))
	}
	cfg.Binary = binary
	runPhases(ctx, cfg, wcfg, c, rec, out, rep)
	if _, err := os.Stat(c.Spare.LogPath); err == nil { // the membership fault started it
		rep.NodeLogs = append(rep.NodeLogs, c.Spare.LogPath)
	}
	return rep, nil
}

// workloadConfig is the workload's part of the configuration.
func workloadConfig(cfg Config) workload.Config {
	return workload.Config{Workers: cfg.Workers, Locks: cfg.LockNames(), TTL: cfg.TTL, LockDelay: cfg.LockDelay,
		OpTimeout: cfg.OpTimeout, MaxWait: 2 * cfg.TTL, MaxHold: 200 * time.Millisecond, ReadRatio: 0.3, BlockingReadRatio: 0.2, CrashRatio: cfg.CrashRatio,
		ClientWorkers: cfg.ClientWorkers(), Cyclers: cfg.CycleWorkers(), IgnoreDone: cfg.IgnoreDone, Seed: cfg.Seed, Watchers: cfg.Watchers,
		DropWatchChanges: cfg.DropWatchChanges, IgnoreStreamEnd: cfg.IgnoreStreamEnd,
		SemaphoreWorkers: cfg.SemaphoreWorkers, SemaphoreLimit: cfg.SemaphoreLimit, RWWorkers: cfg.RWWorkers,
		WriterWait: cfg.CheckerConfig().LivenessBound, StaleRatio: cfg.StaleRatio}
}

// runPhases runs the workload and the nemesis, then the final phases, and fills rep.
func runPhases(ctx context.Context, cfg Config, wcfg workload.Config, c *cluster.Cluster, rec *history.Recorder, out io.Writer, rep *Report) {
	var eps []workload.Endpoint
	for _, n := range c.Nodes {
		eps = append(eps, workload.Endpoint{ID: n.ID, Addr: n.HTTPAddr})
	}
	res := workload.NewResource(rec, cfg.IgnoreTokens)
	wl := workload.New(wcfg, rec, eps, res)
	nem := nemesis.New(nemesis.Config{Faults: cfg.Faults, Quiet: cfg.Quiet, TTL: cfg.TTL,
		ElectionTimeout: cfg.ElectionTimeout, TargetLeader: cfg.TargetLeader, Seed: cfg.Seed, Log: out,
		OldBinary: cfg.OldBinary, NewBinary: cfg.Binary,
		Locks: cfg.LockNames()}, c, wl, rec)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); watchElections(ctx, stop, c, rec) }()
	go func() {
		defer wg.Done()
		if err := wl.Run(ctx, stop); err != nil {
			fmt.Fprintf(out, "jepsen: workload: %v\n", err)
		}
	}()
	go func() { defer wg.Done(); nem.Run(ctx, stop) }()
	t := time.NewTimer(cfg.Time)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	close(stop)
	wg.Wait()
	fmt.Fprintf(out, "%8.3fs jepsen: workload stopped, faults healed; workers crashed holding a lock %d times, client workers were cut off holding one %d times\n",
		float64(rec.Now())/1e9, wl.Crashes(), wl.Cuts())

	sctx, cancel := context.WithTimeout(ctx, settleTimeout)
	if err := c.WaitReady(sctx); err != nil {
		fmt.Fprintf(out, "jepsen: cluster not ready after healing: %v\n", err)
	}
	cancel()
	cc := cfg.CheckerConfig()
	wl.Probe(ctx, cc.LivenessBound)
	fmt.Fprintf(out, "%8.3fs jepsen: liveness probes done\n", float64(rec.Now())/1e9)

	cctx, cancel := context.WithTimeout(ctx, convergeTimeout)
	states := c.States(cctx)
	cancel()
	stopErrs := c.StopAll(ctx, stopTimeout)
	panics := c.Panics() // again, to include anything logged while stopping
	for i := range states {
		states[i].Panics = panics[states[i].Node]
		if err := stopErrs[states[i].Node]; err != nil {
			states[i].StopErr = err.Error()
		}
	}

	ops := rec.Ops()
	if err := rec.Err(); err != nil {
		fmt.Fprintf(out, "jepsen: writing history: %v\n", err)
	}
	cc.ExpectStaleWrites = countFault(ops, nemesis.ClientPause) > 0
	results, lin := checker.CheckHistory(ops, cc)
	results = append(results, checker.CheckConvergence(states, ops))
	if err := lin.WriteHTML(rep.HTMLPath, history.Faults(ops)); err != nil {
		fmt.Fprintf(out, "jepsen: %v\n", err)
		rep.HTMLPath = ""
	}
	rep.fill(ops, results)
}

// countFault counts the starts of a fault in the history.
func countFault(ops []history.Op, fault string) int {
	n := 0
	for _, op := range ops {
		if op.Kind == history.Nemesis && op.Fault == fault && op.Action == history.ActionStart {
			n++
		}
	}
	return n
}

// agentArgs are the agent flags the configuration adds to the cluster's own.
func agentArgs(cfg Config) []string {
	var args []string
	if cfg.LogStore != "" {
		args = append(args, "--log-store", cfg.LogStore)
	}
	if cfg.UnsafeNoLogFsync {
		args = append(args, "--unsafe-no-log-fsync")
	}
	if cfg.UnsafeSkipRejoinCheck {
		args = append(args, "--unsafe-skip-rejoin-check")
	}
	if cfg.UnsafeRestoreKeepsSessions {
		args = append(args, "--unsafe-restore-keeps-sessions")
	}
	if n := cfg.SnapshotEvery; n != 0 {
		args = append(args, "--snapshot-threshold", fmt.Sprint(n), "--trailing-logs", fmt.Sprint(n),
			"--snapshot-interval", snapshotCheck.String())
	}
	return args
}

// snapshotCheck is how often agents check for a snapshot when Config.SnapshotEvery is set.
const snapshotCheck = 250 * time.Millisecond
