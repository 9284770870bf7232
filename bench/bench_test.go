package bench_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/bench"
	"github.com/raftlock/raftlock/config"
)

// TestRunAllWorkloads runs every workload for about a second against an in-process cluster
// and checks that the figures are sane. It measures nothing: figures come from the command.
func TestRunAllWorkloads(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{Tune: func(c *config.Config) {
		// Shorter than the defaults, so the failover trial is quick, yet safe on a busy machine.
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 250*time.Millisecond, 250*time.Millisecond, 125*time.Millisecond
	}})
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	defer dev.Close()
	base := bench.Options{
		Endpoints: dev.Endpoints(),
		Dev:       dev,
		Duration:  600 * time.Millisecond,
		Warmup:    100 * time.Millisecond,
		Version:   "test",
	}
	var lines int
	locks := base
	locks.Workloads = []string{bench.Uncontended, bench.Contended}
	locks.UncontendedClients = []int{1, 4}
	locks.ContendedClients = []int{1, 4} // 1 is skipped: nobody to hand over to
	locks.Progress = func(string) { lines++ }
	rep, err := bench.Run(ctx, locks)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkEnvironment(t, rep.Environment)
	checkLocks(t, rep)
	if lines == 0 {
		t.Error("no progress line")
	}
	checkTable(t, rep, "uncontended", "contended", "fairness", "server CPU/op", "includes the load generator")

	kinds := base
	kinds.Workloads, kinds.KindClients = []string{bench.Semaphore, bench.RWLock}, []int{1, 8}
	rep, err = bench.Run(ctx, kinds)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkKinds(t, rep)
	checkTable(t, rep, "semaphore", "rwlock", "most readers", "writes/s")

	sessions := base
	sessions.Workloads = []string{bench.Sessions}
	sessions.Sessions, sessions.SessionWorkers = 100, 8
	sessions.SessionTTL, sessions.Duration = 3*time.Second, 1200*time.Millisecond // renewed every 1s
	rep, err = bench.Run(ctx, sessions)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	s := rep.Sessions
	if s == nil || s.Created != 100 || s.CreatesPerSec <= 0 || s.Renewals <= 0 || !s.SharedProcess {
		t.Fatalf("sessions: insane figures %+v", s)
	}
	if s.Lost != 0 || s.DeadlineMissed != 0 || s.ServerExpiries != 0 {
		t.Errorf("sessions: lost %d, deadline missed %d, expired on the server %v", s.Lost, s.DeadlineMissed, s.ServerExpiries)
	}
	if s.LeaderRSSBytes <= 0 || s.LeaderCPUSeconds < 0 {
		t.Errorf("sessions: leader figures %+v", s)
	}
	checkTable(t, rep, "sessions", "share one process")

	failover := base
	failover.Workloads, failover.FailoverTrials = []string{bench.Failover}, 1
	rep, err = bench.Run(ctx, failover)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	f := rep.Failover
	if f == nil || len(f.Trials) != 1 || f.Failed != 0 || f.Recovery.Count != 1 || f.Recovery.P50 <= 0 {
		t.Fatalf("failover: %+v", f)
	}
	if tr := f.Trials[0]; tr.Killed == "" || tr.NewLeader == "" || tr.NewLeader == tr.Killed {
		t.Errorf("failover trial: %+v", tr)
	}
	checkTable(t, rep, "failover", "killed")
}

func checkEnvironment(t *testing.T, env bench.Environment) {
	t.Helper()
	if env.ClusterSize != 3 || !env.Dev || env.GOMAXPROCS < 1 || env.Version != "test" || env.ServerVersion == "" {
		t.Errorf("environment = %+v", env)
	}
}

func checkLocks(t *testing.T, rep *bench.Report) {
	t.Helper()
	if len(rep.Uncontended) != 2 {
		t.Fatalf("uncontended results: %d, want 2", len(rep.Uncontended))
	}
	for _, u := range rep.Uncontended {
		if u.Ops <= 0 || u.OpsPerSec <= 0 || u.Acquire.Count != int(u.Ops) || u.Acquire.P50 <= 0 ||
			u.Acquire.P50 > u.Acquire.P99 || u.Acquire.P99 > u.Acquire.Max || u.Release.P50 <= 0 {
			t.Errorf("uncontended C=%d: insane figures %+v", u.Clients, u)
		}
		if len(u.Violations) > 0 {
			t.Errorf("uncontended C=%d: violations %v", u.Clients, u.Violations)
		}
		if u.ServerCPUMicros == nil || *u.ServerCPUMicros <= 0 {
			t.Errorf("uncontended C=%d: no server CPU per op: %v", u.Clients, u.ServerCPUMicros)
		}
	}
	if len(rep.Contended) != 1 {
		t.Fatalf("contended results: %d, want 1 (C=1 skipped)", len(rep.Contended))
	}
	c := rep.Contended[0]
	if c.Grants <= 0 || c.GrantsPerSec <= 0 || c.Handoff.Count == 0 || c.MinGrants <= 0 || c.Fairness < 1 {
		t.Errorf("contended: insane figures %+v", c)
	}
	if c.ServerCPUMicros == nil || *c.ServerCPUMicros <= 0 {
		t.Errorf("contended: no server CPU per grant: %v", c.ServerCPUMicros)
	}
	if c.Overlaps != 0 || c.TokenRegressions != 0 {
		t.Errorf("contended: overlaps %d, token regressions %d: %v", c.Overlaps, c.TokenRegressions, c.Violations)
	}
}

func checkKinds(t *testing.T, rep *bench.Report) {
	t.Helper()
	if len(rep.Semaphore) != 1 || len(rep.RWLock) != 1 {
		t.Fatalf("semaphore and rwlock results: %d and %d, want 1 each (C=1 skipped)", len(rep.Semaphore), len(rep.RWLock))
	}
	s, rw := rep.Semaphore[0], rep.RWLock[0]
	if s.Limit != 2 || s.Grants <= 0 || s.GrantsPerSec <= 0 || s.MostHolders < 1 || s.MostHolders > s.Limit || s.Wait.Count != int(s.Grants) {
		t.Errorf("semaphore: insane figures %+v", s)
	}
	if s.Overflows != 0 || s.DuplicateTokens != 0 {
		t.Errorf("semaphore: %d over the limit, %d duplicate tokens: %v", s.Overflows, s.DuplicateTokens, s.Violations)
	}
	if rw.Writers != 1 || rw.Reads <= 0 || rw.Writes <= 0 || rw.MostReaders < 1 || rw.WriteWait.Count != int(rw.Writes) {
		t.Errorf("rwlock: insane figures %+v", rw)
	}
	if rw.Overlaps != 0 || rw.DuplicateTokens != 0 {
		t.Errorf("rwlock: %d overlaps, %d duplicate tokens: %v", rw.Overlaps, rw.DuplicateTokens, rw.Violations)
	}
}

// checkTable checks that the table mentions want and that the JSON round-trips.
func checkTable(t *testing.T, rep *bench.Report, want ...string) {
	t.Helper()
	var table, js strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(table.String(), w) {
			t.Errorf("table lacks %q:\n%s", w, table.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back bench.Report
	if err := json.Unmarshal([]byte(js.String()), &back); err != nil || back.Environment.ClusterSize != 3 {
		t.Errorf("JSON does not round-trip: %v", err)
	}
}

// TestFailoverNeverKillsItsOwnProcess runs the failover workload against an in-process
// cluster without handing it the Dev: the nodes' process is the bench's, which it must not kill.
func TestFailoverNeverKillsItsOwnProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{})
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	defer dev.Close()
	rep, err := bench.Run(ctx, bench.Options{Endpoints: dev.Endpoints(), Workloads: []string{bench.Failover}, KillProcesses: true})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Failover == nil || rep.Failover.Skipped == "" || len(rep.Failover.Trials) != 0 {
		t.Errorf("failover against this process's nodes should be skipped, got %+v", rep.Failover)
	}
	if runtime.GOOS == "linux" && !strings.Contains(rep.Failover.Skipped, "runs in this process") {
		t.Errorf("skipped for another reason: %s", rep.Failover.Skipped)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	ctx := context.Background()
	for _, o := range []bench.Options{
		{},
		{Endpoints: []string{"http://127.0.0.1:1"}, SessionTTL: time.Second},
		{Endpoints: []string{"http://127.0.0.1:1"}, UncontendedClients: []int{0}},
		{Endpoints: []string{"http://127.0.0.1:1"}, Via: "nowhere"},
	} {
		if _, err := bench.Run(ctx, o); !errors.Is(err, bench.ErrOptions) {
			t.Errorf("Run(%+v) = %v, want ErrOptions", o, err)
		}
	}
}

func TestParseWorkloads(t *testing.T) {
	got, err := bench.ParseWorkloads("all")
	if err != nil || strings.Join(got, ",") != "uncontended,contended,semaphore,rwlock,sessions,failover" {
		t.Errorf("all = %v, %v", got, err)
	}
	got, err = bench.ParseWorkloads("Sessions, contended")
	if err != nil || strings.Join(got, ",") != "sessions,contended" {
		t.Errorf("list = %v, %v", got, err)
	}
	for _, bad := range []string{"", "fast", "uncontended,bogus"} {
		if _, err := bench.ParseWorkloads(bad); !errors.Is(err, bench.ErrOptions) {
			t.Errorf("ParseWorkloads(%q) = %v, want ErrOptions", bad, err)
		}
	}
}
