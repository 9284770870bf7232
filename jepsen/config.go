package jepsen

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/nemesis"
)

// Config describes one run.
type Config struct {
	// Nodes is the cluster size (3 or 5).
	Nodes int
	// Time is how long the workload runs under faults.
	Time time.Duration
	// Faults are the nemesis faults to draw from (see nemesis.ParseFaults).
	Faults []string
	// TargetLeader makes kill and pause always hit the leader.
	TargetLeader bool
	// Seed makes the workload's and the nemesis's choices reproducible.
	Seed int64
	// Workers is the number of concurrent clients.
	Workers int
	// Locks is the number of distinct locks.
	Locks int
	// TTL is the session TTL (API minimum 2s).
	TTL time.Duration
	// LockDelay is the lock-delay of half the workers' sessions (0: none).
	LockDelay time.Duration
	// CrashRatio is the probability that a worker crashes as it is granted a lock, leaving its
	// session to expire (see workload.Config).
	CrashRatio float64
	// ClockSkew sets the nodes' wall clocks this far apart, one from the next (see
	// cluster.Options), so that leader changes cross clocks that disagree.
	ClockSkew time.Duration
	// Quiet is the mean quiet time between faults.
	Quiet time.Duration
	// ElectionTimeout, HeartbeatTimeout and LeaderLeaseTimeout tune the agents' Raft.
	ElectionTimeout, HeartbeatTimeout, LeaderLeaseTimeout time.Duration
	// OpTimeout is the client timeout of requests that do not wait.
	OpTimeout time.Duration
	// Dir receives the artifacts: the history, the visualisation, node data and logs.
	Dir string
	// Binary is a prebuilt raftlock; empty builds one into Dir.
	Binary string
	// OldBinary is a build of an earlier raftlock, for the upgrade fault: the cluster starts on
	// it and the fault rolls the nodes to Binary (and back where allowed). The upgrade fault
	// needs it.
	OldBinary string
	// LogLevel is the agents' log level.
	LogLevel string
	// LogStore is the agents' --log-store (boltdb or wal); empty keeps the agent's default.
	LogStore string
	// SnapshotEvery makes the agents snapshot after this many log entries, checking every
	// 250ms, and keep only as many behind a snapshot, so that snapshots are taken under load
	// and a node that fell behind catches up by installing one; 0 keeps the agents' defaults.
	SnapshotEvery uint64
	// CheckTimeout bounds porcupine's search (0: the checker default); a search cut short is
	// reported as a failure, never as a pass.
	CheckTimeout time.Duration
	// Cyclers is how many of the Go-client workers are cyclers, which keep one session for
	// hundreds of fast Lock/Unlock cycles, in bursts on one lock at a time; negative means the
	// default, a quarter of the client workers (at least one). It is capped at the client
	// workers.
	Cyclers int
	// Watchers is the number of prefix watchers of every lock of the run, in turn raw
	// linearizable and raw stale long polls, the Go client's WatchPrefix (a stream) and raw
	// streamed watches; every acknowledged change must reach each of them, in order.
	Watchers int
	// DropWatchChanges makes the watchers leave one change in seven out of the history: a
	// self-test the watch checker must flag.
	DropWatchChanges bool
	// IgnoreStreamEnd makes the raw streamed watchers take no notice of their stream's end
	// (a node cut off from its leader ends its streams) and stay silent: a self-test the watch
	// checker must flag.
	IgnoreStreamEnd bool
	// Workload says how the workers hold locks: WorkloadRaw (one HTTP request per op),
	// WorkloadClient (through the Go client) or WorkloadAll (half and half, the default).
	Workload string
	// SemaphoreWorkers hold a semaphore of SemaphoreLimit (jepsen-semaphore), and RWWorkers
	// a read/write lock (jepsen-rwlock), through the Go client, beside the other workers (see
	// workload.KindWorker); 0 runs none.
	SemaphoreWorkers, SemaphoreLimit, RWWorkers int
	// StaleRatio is the probability that a semaphore or read/write-lock holder pauses past the
	// end of its hold and then uses the resource under its old token.
	StaleRatio float64
	// IgnoreTokens makes the resource accept every write: a self-test that must fail.
	IgnoreTokens bool
	// IgnoreDone makes the client workers ignore the end of their holds (Mutex.Context,
	// Session.Done): a self-test that the belief checker must flag.
	IgnoreDone bool
	// Secure runs the agents with TLS (API and Raft) and --acl; every worker, probe and
	// observer then holds a token of its own.
	Secure bool
	// UnsafeNoLogFsync starts the agents with the hidden --unsafe-no-log-fsync: a self-test
	// in which power losses must make durability or linearizability fail.
	UnsafeNoLogFsync bool
	// UnsafeSkipRejoinCheck starts the agents with the hidden --unsafe-skip-rejoin-check: a
	// self-test in which the disk-loss nemesis must find a wiped node that came back as a voter.
	UnsafeSkipRejoinCheck bool
	// UnsafeRestoreKeepsSessions starts the agents with the hidden
	// --unsafe-restore-keeps-sessions: a self-test in which the restore nemesis must make belief
	// or held-by-nobody fail.
	UnsafeRestoreKeepsSessions bool
	// Out receives progress, the nemesis log and the summary; may be nil.
	Out io.Writer
}

// Workloads.
const (
	// WorkloadRaw workers send one HTTP request per op, each recorded.
	WorkloadRaw = "raw"
	// WorkloadClient workers hold locks through the Go client, recording what they believe.
	WorkloadClient = "client"
	// WorkloadAll runs half the workers raw and half through the Go client.
	WorkloadAll = "all"
)

// ClientWorkers is how many of the workers use the Go client.
func (c Config) ClientWorkers() int {
	switch c.Workload {
	case WorkloadClient:
		return c.Workers
	case WorkloadRaw:
		return 0
	}
	return c.Workers / 2
}

// CycleWorkers is how many of the client workers are cyclers.
func (c Config) CycleWorkers() int {
	n := c.ClientWorkers()
	if c.Cyclers >= 0 {
		return min(c.Cyclers, n)
	}
	return min(n, max(1, n/4))
}

// DefaultConfig is a short run on three nodes with every fault.
func DefaultConfig() Config {
	return Config{
		Nodes:              3,
		Time:               30 * time.Second,
		Faults:             nemesis.Without(nemesis.All, nemesis.Upgrade),
		Seed:               1,
		Workers:            8,
		Locks:              3,
		TTL:                2 * time.Second,
		LockDelay:          time.Second,
		CrashRatio:         0.01,
		ClockSkew:          10 * time.Second,
		Quiet:              2 * time.Second,
		ElectionTimeout:    time.Second,
		HeartbeatTimeout:   time.Second,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		OpTimeout:          2 * time.Second,
		LogLevel:           "info",
		Workload:           WorkloadAll,
		Cyclers:            -1,
		Watchers:           4,
		SemaphoreLimit:     2,
		StaleRatio:         0.05,
	}
}

// CheckerConfig is the checker configuration that fits the run.
func (c Config) CheckerConfig() checker.Config {
	cc := checker.DefaultConfig(c.TTL)
	// After a cluster fault: a new election, then every session timer restarts at the full TTL,
	// and every lock-delay at its full length.
	cc.Recovery = c.TTL + c.LockDelay + 2*c.ElectionTimeout + 3*time.Second
	cc.LivenessBound = c.TTL + c.LockDelay + 2*c.ElectionTimeout + 10*time.Second
	if c.CheckTimeout > 0 {
		cc.LinearizabilityTimeout = c.CheckTimeout
	}
	return cc
}

// LockNames are the names of the run's locks.
func (c Config) LockNames() []string {
	out := make([]string, c.Locks)
	for i := range out {
		out[i] = fmt.Sprintf("jepsen-lock-%d", i)
	}
	return out
}

// String renders the configuration on one line.
func (c Config) String() string {
	faults := strings.Join(c.Faults, ",")
	if faults == "" {
		faults = "none"
	}
	s := fmt.Sprintf("nodes=%d time=%s nemesis=%s seed=%d workload=%s workers=%d cyclers=%d locks=%d ttl=%s election-timeout=%s heartbeat-timeout=%s leader-lease=%s",
		c.Nodes, c.Time, faults, c.Seed, c.workload(), c.Workers, c.CycleWorkers(), c.Locks, c.TTL, c.ElectionTimeout, c.HeartbeatTimeout, c.LeaderLeaseTimeout)
	s += fmt.Sprintf(" watchers=%d", c.Watchers)
	if c.LockDelay != 0 {
		s += " lock-delay=" + c.LockDelay.String()
	}
	if c.CrashRatio != 0 {
		s += fmt.Sprintf(" crash-ratio=%g", c.CrashRatio)
	}
	if c.SemaphoreWorkers > 0 {
		s += fmt.Sprintf(" semaphore-workers=%d semaphore-limit=%d", c.SemaphoreWorkers, c.SemaphoreLimit)
	}
	if c.RWWorkers > 0 {
		s += fmt.Sprintf(" rw-workers=%d", c.RWWorkers)
	}
	if c.SemaphoreWorkers+c.RWWorkers > 0 {
		s += fmt.Sprintf(" stale-ratio=%g", c.StaleRatio)
	}
	if c.ClockSkew != 0 {
		s += " clock-skew=" + c.ClockSkew.String()
	}
	if c.LogStore != "" {
		s += " log-store=" + c.LogStore
	}
	if c.OldBinary != "" {
		s += " old-binary=" + c.OldBinary
	}
	if c.Secure {
		s += " secure=tls+acl"
	}
	if c.SnapshotEvery != 0 {
		s += fmt.Sprintf(" snapshot-every=%d", c.SnapshotEvery)
	}
	if c.TargetLeader {
		s += " target=leader"
	}
	if c.IgnoreTokens {
		s += " resource=IGNORES-TOKENS(self-test)"
	}
	if c.DropWatchChanges {
		s += " watchers=DROP-CHANGES(self-test)"
	}
	if c.IgnoreStreamEnd {
		s += " watchers=IGNORE-STREAM-END(self-test)"
	}
	if c.IgnoreDone {
		s += " client-workers=IGNORE-DONE(self-test)"
	}
	if c.UnsafeNoLogFsync {
		s += " agents=NO-LOG-FSYNC(self-test)"
	}
	if c.UnsafeSkipRejoinCheck {
		s += " agents=NO-REJOIN-CHECK(self-test)"
	}
	if c.UnsafeRestoreKeepsSessions {
		s += " agents=RESTORE-KEEPS-SESSIONS(self-test)"
	}
	return s
}

// workload is the workload's name, the default for "".
func (c Config) workload() string {
	if c.Workload == "" {
		return WorkloadAll
	}
	return c.Workload
}

// validate refuses configurations the harness cannot run meaningfully.
func (c Config) validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("jepsen: --nodes %d: need at least 1", c.Nodes)
	case c.Watchers < 0:
		return fmt.Errorf("jepsen: --watchers %d: must not be negative", c.Watchers)
	case c.DropWatchChanges && c.Watchers == 0:
		return fmt.Errorf("jepsen: dropping watch changes needs watchers")
	case c.IgnoreStreamEnd && c.Watchers < 4:
		return fmt.Errorf("jepsen: ignoring streams' ends needs streamed watchers (--watchers 4 or more)")
	case c.Workers < 1 || c.Locks < 1:
		return fmt.Errorf("jepsen: need at least one worker and one lock")
	case c.TTL < 2*time.Second:
		return fmt.Errorf("jepsen: --ttl %s is below the API minimum of 2s", c.TTL)
	case c.CrashRatio < 0 || c.CrashRatio > 1:
		return fmt.Errorf("jepsen: --crash-ratio %g is not a probability", c.CrashRatio)
	case c.LockDelay < 0 || c.LockDelay > time.Minute:
		return fmt.Errorf("jepsen: --lock-delay %s is outside the API's 0–60s", c.LockDelay)
	case slices.Contains(c.Faults, nemesis.Upgrade) && c.OldBinary == "":
		return fmt.Errorf("jepsen: the %s fault needs an old build (--old-binary)", nemesis.Upgrade)
	case c.Time <= 0:
		return fmt.Errorf("jepsen: --time must be positive")
	case c.Dir == "":
		return fmt.Errorf("jepsen: no artifact directory")
	case c.Workload != "" && c.Workload != WorkloadRaw && c.Workload != WorkloadClient && c.Workload != WorkloadAll:
		return fmt.Errorf("jepsen: --workload %q: want %s, %s or %s", c.Workload, WorkloadRaw, WorkloadClient, WorkloadAll)
	case c.IgnoreDone && c.ClientWorkers() == 0:
		return fmt.Errorf("jepsen: ignoring Done needs client workers (--workload client or all)")
	case c.SemaphoreWorkers < 0 || c.RWWorkers < 0 || c.SemaphoreWorkers > 0 && (c.SemaphoreLimit < 1 || c.SemaphoreLimit > 1000):
		return fmt.Errorf("jepsen: --semaphore-workers %d, --semaphore-limit %d, --rw-workers %d: need workers ≥ 0 and a limit of 1 to 1000",
			c.SemaphoreWorkers, c.SemaphoreLimit, c.RWWorkers)
	case c.StaleRatio < 0 || c.StaleRatio > 1:
		return fmt.Errorf("jepsen: --stale-ratio %g is not a probability", c.StaleRatio)
	}
	return nil
}
