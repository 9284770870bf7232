//go:build linux

package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/bench"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
	jcluster "github.com/raftlock/raftlock/jepsen/cluster"
)

// devChildEnv makes the test binary serve a dev cluster instead of running tests (see
// TestFailoverNeverKillsASharedProcess).
const devChildEnv = "RAFTLOCK_BENCH_TEST_DEV_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(devChildEnv) != "" {
		os.Exit(serveDevChild())
	}
	os.Exit(testkit.Main(m))
}

// serveDevChild starts a dev cluster, prints its endpoints on a line, and serves until its
// standard input closes (when the test that started it ends).
func serveDevChild() int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer dev.Close()
	fmt.Println(strings.Join(dev.Endpoints(), ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// TestFailoverNeverKillsASharedProcess points the failover workload at a dev cluster in
// another process: its nodes share that process, so killing the leader's would kill them all.
func TestFailoverNeverKillsASharedProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	child := exec.CommandContext(ctx, os.Args[0])
	child.Env = append(os.Environ(), devChildEnv+"=1")
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		child.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the child's endpoints: %v", err)
	}
	rep, err := bench.Run(ctx, bench.Options{Endpoints: strings.Split(strings.TrimSpace(line), ","),
		Workloads: []string{bench.Failover}, KillProcesses: true})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if f := rep.Failover; f == nil || len(f.Trials) != 0 || !strings.Contains(f.Skipped, "run in the same process") {
		t.Errorf("failover against nodes that share a process should be skipped, got %+v", f)
	}
	if !alive(child.Process.Pid) {
		t.Error("the dev cluster's process died")
	}
}

// TestFailoverOfAClusterOfProcesses runs the failover workload against three `raftlock agent`
// processes, as `raftlock bench --endpoints` does: first with a supervisor that restarts
// killed nodes (--supervised), then with the bench restarting them itself.
func TestFailoverOfAClusterOfProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := jcluster.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := jcluster.Start(ctx, jcluster.Options{Binary: bin, Dir: dir, Nodes: 3, LogLevel: "warn",
		HeartbeatTimeout: 250 * time.Millisecond, ElectionTimeout: 250 * time.Millisecond, LeaderLeaseTimeout: 125 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var endpoints []string
	for _, a := range c.HTTPAddrs() {
		endpoints = append(endpoints, "http://"+a)
	}
	opts := bench.Options{Endpoints: endpoints, Workloads: []string{bench.Failover}, FailoverTrials: 2, KillProcesses: true, Version: "test"}

	// Before any kill: CPU per operation read from three separate processes.
	t.Run("server CPU per op", func(t *testing.T) {
		locks := bench.Options{Endpoints: endpoints, Workloads: []string{bench.Uncontended}, UncontendedClients: []int{2},
			Duration: time.Second, Warmup: 200 * time.Millisecond, Version: "test"}
		rep, err := bench.Run(ctx, locks)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		u := rep.Uncontended[0]
		if u.ServerCPUMicros == nil || *u.ServerCPUMicros <= 0 {
			t.Fatalf("no server CPU per op: %+v", u)
		}
		checkTable(t, rep, "server CPU/op")
		var table strings.Builder
		_ = rep.WriteTable(&table)
		if strings.Contains(table.String(), "load generator") {
			t.Errorf("separate processes reported as sharing the bench's:\n%s", table.String())
		}
	})

	t.Run("not asked to kill", func(t *testing.T) {
		unasked := opts
		unasked.KillProcesses = false
		rep, err := bench.Run(ctx, unasked)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if f := rep.Failover; f == nil || len(f.Trials) != 0 || !strings.Contains(f.Skipped, "name it") {
			t.Errorf("failover without KillProcesses should be skipped, got %+v", f)
		}
		for _, id := range c.IDs() {
			if n := c.Node(id); n.State() != jcluster.Running {
				t.Errorf("%s is %s", id, n.State())
			}
		}
	})

	t.Run("supervised", func(t *testing.T) {
		pids := map[string]int{}
		for _, id := range c.IDs() {
			pids[id] = c.Node(id).PID()
		}
		// The supervisor: it starts every node of the cluster whose process ended, a second
		// later (systemd's RestartSec), so that the trial is over before the node is back.
		sctx, stop := context.WithCancel(ctx)
		supervised := make(chan struct{})
		go func() {
			defer close(supervised)
			for sleepCtx(sctx, 10*time.Millisecond) {
				for _, id := range c.IDs() {
					if n := c.Node(id); n.State() == jcluster.Stopped && sleepCtx(sctx, time.Second) {
						_ = n.Start()
					}
				}
			}
		}()
		supervisedOpts := opts
		supervisedOpts.Supervised = true
		rep, err := bench.Run(ctx, supervisedOpts)
		stop()
		<-supervised
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		f := checkFailover(t, rep, 2)
		first := f.Trials[0]
		if first.KilledPID != pids[first.Killed] {
			t.Errorf("trial 1 killed pid %d, but the leader %s ran as pid %d (nodes: %v)", first.KilledPID, first.Killed, pids[first.Killed], pids)
		}
		for i, tr := range f.Trials {
			if tr.RestartedPID != 0 {
				t.Errorf("trial %d: the bench started pid %d although a supervisor restarts the nodes", i+1, tr.RestartedPID)
			}
			if c.Node(tr.Killed).PID() == tr.KilledPID {
				t.Errorf("trial %d: the supervisor's process of %s is still pid %d, the one the bench killed", i+1, tr.Killed, tr.KilledPID)
			}
		}
		checkWhole(ctx, t, endpoints)
	})

	t.Run("restarted by the bench", func(t *testing.T) {
		pids := map[string]int{}
		for _, id := range c.IDs() {
			pids[id] = c.Node(id).PID()
		}
		rep, err := bench.Run(ctx, opts)
		if rep != nil && rep.Failover != nil {
			f := rep.Failover
			t.Cleanup(func() { // the restarted nodes outlive the bench; not the test
				for _, tr := range f.Trials {
					if tr.RestartedPID != 0 {
						_ = syscall.Kill(tr.RestartedPID, syscall.SIGKILL)
					}
				}
			})
		}
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		f := checkFailover(t, rep, 2)
		for i, tr := range f.Trials {
			if pid, ok := pids[tr.Killed]; ok && tr.KilledPID != pid {
				t.Errorf("trial %d killed pid %d, but the leader %s ran as pid %d", i+1, tr.KilledPID, tr.Killed, pid)
			}
			if tr.RestartedPID == 0 || tr.RestartedPID == tr.KilledPID {
				t.Fatalf("trial %d: restarted as pid %d after killing pid %d", i+1, tr.RestartedPID, tr.KilledPID)
			}
			pids[tr.Killed] = tr.RestartedPID // a later trial may kill the restarted process
			// The restarted node writes where the first one did, with the same options.
			if want := c.Node(tr.Killed).LogPath; tr.RestartLog != want {
				t.Errorf("trial %d: the restarted node writes to %q, not %q", i+1, tr.RestartLog, want)
			}
			if alive(tr.KilledPID) {
				t.Errorf("trial %d: the killed pid %d still runs", i+1, tr.KilledPID)
			}
		}
		checkWhole(ctx, t, endpoints)
		last := f.Trials[len(f.Trials)-1]
		args, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(last.RestartedPID), "cmdline"))
		if err != nil || !strings.Contains(string(args), "--id\x00"+last.Killed+"\x00") {
			t.Errorf("the restarted %s runs %q (%v)", last.Killed, args, err)
		}
	})
}

// checkFailover checks that the workload ran the trials and each one recovered.
func checkFailover(t *testing.T, rep *bench.Report, trials int) *bench.FailoverResult {
	t.Helper()
	f := rep.Failover
	if f == nil || f.Skipped != "" || len(f.Trials) != trials || f.Failed != 0 || f.Recovery.Count != trials {
		t.Fatalf("failover: %+v", f)
	}
	for i, tr := range f.Trials {
		if tr.Killed == "" || tr.NewLeader == "" || tr.NewLeader == tr.Killed || tr.KilledPID == 0 || tr.RecoveryMs <= 0 {
			t.Errorf("trial %d: %+v", i+1, tr)
		}
	}
	return f
}

// checkWhole checks that every node serves again once the workload is over.
func checkWhole(ctx context.Context, t *testing.T, endpoints []string) {
	t.Helper()
	cl, err := client.New(endpoints)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, ep := range endpoints {
		if err := cl.Raw().Ready(ctx, ep); err != nil {
			t.Errorf("%s is not ready after the workload: %v", ep, err)
		}
	}
}

// alive reports whether process pid runs (not a zombie).
func alive(pid int) bool {
	proc, err := procfs.NewProc(pid)
	if err != nil {
		return false
	}
	st, err := proc.Stat()
	return err == nil && st.State != "Z" && st.State != "X"
}

// sleepCtx waits d, reporting false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
