package bench

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// State is the large-state workload (RunState): it starts its own cluster of agent processes,
// so it is not one of Run's workloads.
const State = "state"

// StateOptions configure RunState. Zero fields take the defaults named on each.
type StateOptions struct {
	// Binary is the raftlock executable whose `agent` command the cluster runs. Required.
	Binary string
	// Dir holds the nodes' data directories and logs; default a temporary directory, removed
	// at the end.
	Dir string
	// Sessions, Locks and Waiters are the state to build: Sessions sessions (TTL 24h, so that
	// none needs renewing), Locks held locks (lock j held by session j mod Sessions) and
	// Waiters queued acquires (session k waits for lock k+1); defaults 10,000, Sessions and a
	// tenth of Locks. Waiters must not exceed Locks, and Sessions must be at least 2.
	Sessions, Locks, Waiters int
	// Clients is how many requests build the state concurrently; default 64.
	Clients int
	// WaiterBatch is how many waiting acquires are open at once; default 5,000 (each holds a
	// connection to the leader, and a process may open 20,000 files here).
	WaiterBatch int
	// LogStore is the nodes' --log-store; default theirs (wal).
	LogStore string
	// AgentFlags are more flags for every agent (a test lowers --snapshot-threshold, say).
	AgentFlags []string
	// ProbeTime bounds how long the stall probe waits for the leader's next Raft snapshot;
	// default 3 minutes.
	ProbeTime time.Duration
	// Progress, if set, receives a one-line status as the workload goes.
	Progress func(line string)
}

func (o StateOptions) withDefaults() (StateOptions, error) {
	if o.Sessions == 0 {
		o.Sessions = 10_000
	}
	if o.Locks == 0 {
		o.Locks = o.Sessions
	}
	if o.Waiters == 0 {
		o.Waiters = o.Locks / 10
	}
	if o.Clients == 0 {
		o.Clients = 64
	}
	if o.WaiterBatch == 0 {
		o.WaiterBatch = 5000
	}
	if o.ProbeTime == 0 {
		o.ProbeTime = 3 * time.Minute
	}
	var errs []error
	if o.Binary == "" {
		errs = append(errs, fmt.Errorf("%w: no raftlock binary to run the agents", ErrOptions))
	}
	if o.Sessions < 2 || o.Locks < 1 || o.Waiters < 0 || o.Waiters > o.Locks {
		errs = append(errs, fmt.Errorf("%w: want at least 2 sessions, at least 1 lock and no more waiters than locks", ErrOptions))
	}
	if o.Clients < 1 || o.WaiterBatch < 1 || o.WaiterBatch > 15_000 {
		errs = append(errs, fmt.Errorf("%w: clients must be positive and the waiter batch 1 to 15000", ErrOptions))
	}
	return o, errors.Join(errs...)
}

// StateReport holds the figures of the large-state workload.
type StateReport struct {
	Sessions int `json:"sessions"`
	Locks    int `json:"locks"`
	Waiters  int `json:"waiters"`
	// Server* are what the leader counted once the state was built (raftlock_sessions,
	// raftlock_locks_held, raftlock_waiters).
	ServerSessions float64 `json:"server_sessions"`
	ServerLocks    float64 `json:"server_locks"`
	ServerWaiters  float64 `json:"server_waiters"`
	// Build rates: each session create and each acquire is one request and one commit.
	SessionsSeconds  float64  `json:"sessions_seconds"`
	SessionsPerSec   float64  `json:"sessions_per_sec"`
	LocksSeconds     float64  `json:"locks_seconds"`
	LocksPerSec      float64  `json:"locks_per_sec"`
	WaitersSeconds   float64  `json:"waiters_seconds"`
	LeaderTransfers  int      `json:"leader_transfers"`
	BuildErrors      int64    `json:"build_errors"`
	BuildErrorSample []string `json:"build_error_samples,omitempty"`
	// Memory is each node's live heap (after a forced collection) and resident memory at
	// each step. PerEntryLeader divides the growth of the leader's (the node leading at the
	// end of the step) by the count, PerEntryFollower that of a node that followed at both
	// ends of the step. The waiters are queued over leader changes, so a leader's growth
	// over that step also holds the session timers a new leader starts.
	Memory           []StateMemory   `json:"memory"`
	MemoryErrors     int             `json:"memory_errors,omitempty"`
	PerEntryLeader   StatePerEntryOf `json:"per_entry_leader"`
	PerEntryFollower StatePerEntryOf `json:"per_entry_follower"`
	// Restarted*HeapPerEntry divide a node's live heap after the start from disk, less its
	// heap when empty, by sessions + locks + waiters: what the whole state costs a node that
	// holds nothing else.
	RestartedLeaderHeapPerEntry   float64 `json:"restarted_leader_heap_bytes_per_entry"`
	RestartedFollowerHeapPerEntry float64 `json:"restarted_follower_heap_bytes_per_entry"`
	// Snapshot: the leader's next Raft snapshot (its duration and size from its /metrics),
	// and a backup (GET /v1/snapshot from the leader) while lock traffic runs.
	RaftSnapshots       int     `json:"raft_snapshots"`
	RaftSnapshotSeconds float64 `json:"raft_snapshot_seconds"`
	RaftSnapshotBytes   float64 `json:"raft_snapshot_bytes"`
	BackupSeconds       float64 `json:"backup_seconds"`
	BackupBytes         int64   `json:"backup_bytes"`
	// Probe is one client's acquire+release loop on a lock of its own while the snapshots
	// were taken: its latency outside any snapshot, and its longest operation that overlapped
	// the Raft snapshot, and the backup.
	Probe                Latency  `json:"probe_outside_snapshots"`
	ProbeMaxInSnapshotMs float64  `json:"probe_max_in_raft_snapshot_ms"`
	ProbeMaxInBackupMs   float64  `json:"probe_max_in_backup_ms"`
	ProbeOpsInSnapshot   int      `json:"probe_ops_in_raft_snapshot"`
	ProbeOpsInBackup     int      `json:"probe_ops_in_backup"`
	ProbeErrors          int64    `json:"probe_errors"`
	ProbeErrorSample     []string `json:"probe_error_samples,omitempty"`
	// CatchUpSeconds is the time from starting a fresh node (empty data directory, --join) to
	// its having applied the leader's log as it was when it started (through a snapshot sent
	// by the leader); CatchUpSnapshots counts the snapshots it wrote to its disk by then
	// (received from the leader, or taken).
	CatchUpSeconds   float64 `json:"catch_up_seconds"`
	CatchUpSnapshots float64 `json:"catch_up_snapshots_installed"`
	// StopSeconds is how long a graceful stop of every node took (they snapshot first);
	// StartSeconds the time from starting all three again to every node ready and an acquire
	// granted; StartPeakRSS the largest node's resident memory high-water mark after it.
	StopSeconds  float64 `json:"stop_seconds"`
	StartSeconds float64 `json:"start_seconds"`
	StartPeakRSS float64 `json:"start_peak_rss_bytes"`
	// RestoreSeconds is how long PUT /v1/snapshot of the backup took (the leader installs it,
	// the followers are sent it); RestorePeakRSS the largest growth of a node's resident
	// memory high-water mark over its resident memory before, and RestorePeakRSSAbs the
	// largest high-water mark.
	RestoreSeconds    float64 `json:"restore_seconds"`
	RestorePeakRSS    float64 `json:"restore_peak_rss_growth_bytes"`
	RestorePeakRSSAbs float64 `json:"restore_peak_rss_bytes"`
	RestoredLocks     int     `json:"restored_locks"`
	// Environment.
	NumCPU       int      `json:"num_cpu"`
	CPUModel     string   `json:"cpu_model"`
	LoadAvgStart string   `json:"load_avg_start,omitempty"`
	LoadAvgEnd   string   `json:"load_avg_end,omitempty"`
	StealPercent *float64 `json:"steal_percent,omitempty"`
	TotalSeconds float64  `json:"total_seconds"`
	Dir          string   `json:"dir"`
}

// StatePerEntryOf is the memory per session, per held lock and per waiter.
type StatePerEntryOf struct {
	Session StatePerEntry `json:"session"`
	Lock    StatePerEntry `json:"lock"`
	Waiter  StatePerEntry `json:"waiter"`
}

// StatePerEntry is the growth of a node's live heap and resident memory per entry, in bytes.
type StatePerEntry struct {
	Heap float64 `json:"heap_bytes"`
	RSS  float64 `json:"rss_bytes"`
}

// StateMemory is one node's memory at one step of the workload.
type StateMemory struct {
	Step   string  `json:"step"`
	Node   string  `json:"node"`
	Leader bool    `json:"leader"`
	Heap   float64 `json:"heap_bytes"`
	RSS    float64 `json:"rss_bytes"`
}

// WriteTable writes the report for a reader.
func (r *StateReport) WriteTable(out io.Writer) error {
	mib := func(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
	lines := [][2]string{
		{"state built", fmt.Sprintf("%d sessions, %d locks held, %d waiters (the leader counts %.0f, %.0f, %.0f)",
			r.Sessions, r.Locks, r.Waiters, r.ServerSessions, r.ServerLocks, r.ServerWaiters)},
		{"build", fmt.Sprintf("sessions %.0f/s (%.1fs), acquires %.0f/s (%.1fs), waiters %.1fs over %d leader changes, %d errors",
			r.SessionsPerSec, r.SessionsSeconds, r.LocksPerSec, r.LocksSeconds, r.WaitersSeconds, r.LeaderTransfers, r.BuildErrors)},
		{"memory per session", r.perEntry(func(p StatePerEntryOf) StatePerEntry { return p.Session })},
		{"memory per held lock", r.perEntry(func(p StatePerEntryOf) StatePerEntry { return p.Lock })},
		{"memory per waiter", r.perEntry(func(p StatePerEntryOf) StatePerEntry { return p.Waiter })},
		{"after the start from disk", fmt.Sprintf("leader %.0f B heap per entry (session, lock or waiter), follower %.0f B",
			r.RestartedLeaderHeapPerEntry, r.RestartedFollowerHeapPerEntry)},
		{"raft snapshot (leader)", fmt.Sprintf("%.2fs, %s (%d taken while probing)", r.RaftSnapshotSeconds, mib(r.RaftSnapshotBytes), r.RaftSnapshots)},
		{"backup (GET /v1/snapshot)", fmt.Sprintf("%.2fs, %s", r.BackupSeconds, mib(float64(r.BackupBytes)))},
		{"lock traffic, outside snapshots", fmt.Sprintf("acquire+release p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d ops, %d errors)",
			r.Probe.P50, r.Probe.P99, r.Probe.Max, r.Probe.Count, r.ProbeErrors)},
		{"longest op during the raft snapshot", fmt.Sprintf("%.1f ms (%d ops)", r.ProbeMaxInSnapshotMs, r.ProbeOpsInSnapshot)},
		{"longest op during the backup", fmt.Sprintf("%.1f ms (%d ops)", r.ProbeMaxInBackupMs, r.ProbeOpsInBackup)},
		{"fresh node catches up", fmt.Sprintf("%.1fs (%.0f snapshots written to its disk)", r.CatchUpSeconds, r.CatchUpSnapshots)},
		{"graceful stop of all nodes", fmt.Sprintf("%.1fs", r.StopSeconds)},
		{"start from disk to serving", fmt.Sprintf("%.1fs, peak RSS %s", r.StartSeconds, mib(r.StartPeakRSS))},
		{"restore of the backup", fmt.Sprintf("%.1fs (%d locks), peak RSS %s (+%s over before)", r.RestoreSeconds, r.RestoredLocks,
			mib(r.RestorePeakRSSAbs), mib(r.RestorePeakRSS))},
	}
	steal := "unknown"
	if r.StealPercent != nil {
		steal = fmt.Sprintf("%.1f %%", *r.StealPercent)
	}
	lines = append(lines, [2]string{"machine", fmt.Sprintf("%d CPUs (%s), load %s → %s, steal %s, %.0fs in all",
		r.NumCPU, r.CPUModel, r.LoadAvgStart, r.LoadAvgEnd, steal, r.TotalSeconds)})
	for _, l := range lines {
		if _, err := fmt.Fprintf(out, "%-38s %s\n", l[0], l[1]); err != nil {
			return err
		}
	}
	for _, m := range r.Memory {
		lead := ""
		if m.Leader {
			lead = " (leader)"
		}
		if _, err := fmt.Fprintf(out, "  memory %-16s %s%-9s heap %s, RSS %s\n", m.Step, m.Node, lead, mib(m.Heap), mib(m.RSS)); err != nil {
			return err
		}
	}
	return nil
}

// perEntry formats one per-entry memory figure of the leader and of a follower.
func (r *StateReport) perEntry(of func(StatePerEntryOf) StatePerEntry) string {
	l, f := of(r.PerEntryLeader), of(r.PerEntryFollower)
	return fmt.Sprintf("leader %.0f B heap, %.0f B RSS; follower %.0f B heap, %.0f B RSS", l.Heap, l.RSS, f.Heap, f.RSS)
}
