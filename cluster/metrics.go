package cluster

import (
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlock/raftlock/fsm"
)

// nodeMetrics are what a node measures for operators beyond its counters: the latency of its
// log writes, its snapshots and restores, the leaders it saw. Its collector (Node.Collector)
// adds the gauges read at each scrape. Every label takes a value this node chooses (a member
// id, a feature name of this build), never one a client sends.
type nodeMetrics struct {
	appendLatency   prometheus.Histogram
	fsyncLatency    prometheus.Histogram
	snapshotLatency prometheus.Histogram
	restoreLatency  prometheus.Histogram

	leaderChanges   atomic.Uint64
	storageFailures atomic.Uint64
	snapshots       atomic.Uint64
	restores        atomic.Uint64
	// readIndexesByAsker and readIndexesByAcks count the read indexes this node answered as
	// leader: confirmed with the asking member counted, or by acknowledgments alone.
	readIndexesByAsker atomic.Uint64
	readIndexesByAcks  atomic.Uint64

	mu sync.Mutex
	// lastSnapshot is the newest snapshot this node wrote (taken, received from the leader or
	// restored), or found on disk at start; zero time when it has none.
	lastSnapshot     time.Time
	lastSnapshotIdx  uint64
	lastSnapshotSize int64
	lastRestoreSize  int64
	// lastRecovery is when `raftlock recover` last rewrote this data directory (recoveredFile).
	lastRecovery time.Time

	started time.Time
}

// Latency buckets of a disk write, from a fast SSD's fsync to a stalled disk.
var diskBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// Duration buckets of a snapshot or restore, from an empty state to a large one on a slow disk.
var snapshotBuckets = []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newNodeMetrics() *nodeMetrics {
	return &nodeMetrics{
		appendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftlock_log_append_duration_seconds",
			Help: "Time to store a batch of entries in the Raft log, fsync included (both log stores).", Buckets: diskBuckets}),
		fsyncLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftlock_log_fsync_duration_seconds",
			Help: "Time of each fsync of the Raft log's segment files (the wal log store; boltdb syncs inside raftlock_log_append_duration_seconds).", Buckets: diskBuckets}),
		snapshotLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftlock_snapshot_duration_seconds",
			Help: "Time to write a snapshot to disk, from its creation to its durable close (taken here or received from the leader).", Buckets: snapshotBuckets}),
		restoreLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "raftlock_restore_duration_seconds",
			Help: "Time of each backup restore this node ran as leader, from its request until every member installed it.", Buckets: snapshotBuckets}),
		started: time.Now(),
	}
}

// observeLeader counts a leader change: raft reports each change of the leader it knows, and
// a change to a leader (not to none) is one the cluster made. It never sends the observation
// on (it is raft's observer filter, called on raft's goroutine).
func (m *nodeMetrics) observeLeader(o *raft.Observation) bool {
	if l, ok := o.Data.(raft.LeaderObservation); ok && l.LeaderID != "" {
		m.leaderChanges.Add(1)
	}
	return false
}

// snapshotWritten records a snapshot made durable on this node.
func (m *nodeMetrics) snapshotWritten(index uint64, size int64, took time.Duration) {
	m.snapshots.Add(1)
	m.snapshotLatency.Observe(took.Seconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastSnapshot, m.lastSnapshotIdx, m.lastSnapshotSize = time.Now(), index, size
}

// restored records a backup restore this node ran.
func (m *nodeMetrics) restored(size int64, took time.Duration) {
	m.restores.Add(1)
	m.restoreLatency.Observe(took.Seconds())
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastRestoreSize = size
}

// loadSnapshot sets the last snapshot from the newest one on disk, at start: its id is
// raft's "term-index-milliseconds".
func (m *nodeMetrics) loadSnapshot(snaps raft.SnapshotStore) {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return
	}
	s := list[0]
	var at time.Time
	if i := strings.LastIndexByte(s.ID, '-'); i >= 0 {
		if ms, err := strconv.ParseInt(s.ID[i+1:], 10, 64); err == nil {
			at = time.UnixMilli(ms)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastSnapshot, m.lastSnapshotIdx, m.lastSnapshotSize = at, s.Index, s.Size
}

// recoveredFile is the file in the data directory where Recover notes when it rewrote it, so
// that the node started on it says so in its metrics.
const recoveredFile = "recovered-at"

// markRecovered notes in dataDir that it was recovered now (best effort: the metric is all
// that reads it).
func markRecovered(dataDir string) {
	path := filepath.Join(dataDir, recoveredFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		return
	}
	_, err = io.WriteString(f, strconv.FormatInt(time.Now().Unix(), 10)+"\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr == nil {
		_ = syncDir(dataDir)
	}
}

// loadRecovered reads when dataDir was last recovered, if ever.
func (m *nodeMetrics) loadRecovered(dataDir string) {
	b, err := os.ReadFile(filepath.Join(dataDir, recoveredFile))
	if err != nil {
		return
	}
	if sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil {
		m.mu.Lock()
		m.lastRecovery = time.Unix(sec, 0)
		m.mu.Unlock()
	}
}

// unixSeconds is t as unix seconds, 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// Collector returns the node's Prometheus metrics beyond its Counters: leadership and contact,
// replication lag (per follower, on the leader), log write latency, snapshots, restores,
// recoveries, storage failures, removal and the features enabled. Register it once, in one
// registry (the HTTP API's /metrics does).
func (n *Node) Collector() prometheus.Collector { return nodeCollector{n} }

type nodeCollector struct{ n *Node }

var (
	descLeaderChanges = prometheus.NewDesc("raftlock_raft_leader_changes_total",
		"Leader changes this node saw (each time it learned of a new leader, itself included).", nil, nil)
	descHasLeader = prometheus.NewDesc("raftlock_raft_has_leader",
		"1 if this node knows a leader, else 0.", nil, nil)
	descLastContact = prometheus.NewDesc("raftlock_raft_last_contact_seconds",
		"Seconds since this node last heard from the leader (0 on the leader; since start if never).", nil, nil)
	descFollowerLag = prometheus.NewDesc("raftlock_raft_follower_lag_entries",
		"On the leader: log entries the follower lacks (the leader's last index minus the newest index the follower accepted).", []string{"follower"}, nil)
	descFollowerContact = prometheus.NewDesc("raftlock_raft_follower_last_contact_seconds",
		"On the leader: seconds since the follower last answered an append or heartbeat (since this node started if never).", []string{"follower"}, nil)
	descApplyLag = prometheus.NewDesc("raftlock_raft_apply_lag_entries",
		"Entries this node knows committed but has not applied yet (commit index minus applied index).", nil, nil)
	descLastIndex = prometheus.NewDesc("raftlock_raft_last_log_index",
		"Last index in this node's Raft log (or snapshot).", nil, nil)
	descStorageFailures = prometheus.NewDesc("raftlock_storage_failures_total",
		"Writes to the Raft log or stable store that failed (the node stops writing at the first).", nil, nil)
	descSnapshots = prometheus.NewDesc("raftlock_snapshots_total",
		"Snapshots written to this node's disk since start: taken here, received from the leader, or restored.", nil, nil)
	descSnapshotIndex = prometheus.NewDesc("raftlock_snapshot_last_index",
		"Log index of the newest snapshot on this node's disk (0 if none).", nil, nil)
	descSnapshotTime = prometheus.NewDesc("raftlock_snapshot_last_timestamp_seconds",
		"Unix time of the newest snapshot on this node's disk (0 if none): its age is time() minus this.", nil, nil)
	descSnapshotSize = prometheus.NewDesc("raftlock_snapshot_last_size_bytes",
		"Size of the newest snapshot on this node's disk.", nil, nil)
	descRestores = prometheus.NewDesc("raftlock_restores_total",
		"Backup restores this node ran, as leader, since start.", nil, nil)
	descRestoreSize = prometheus.NewDesc("raftlock_restore_last_size_bytes",
		"Size of the state installed by the last backup restore this node ran.", nil, nil)
	descRecovery = prometheus.NewDesc("raftlock_recovery_last_timestamp_seconds",
		"Unix time `raftlock recover` last rewrote this node's data directory (0 if never).", nil, nil)
	descRemoved = prometheus.NewDesc("raftlock_node_removed",
		"1 if this node counts itself removed from the cluster (it serves nothing), else 0.", nil, nil)
	descReadIndexes = prometheus.NewDesc("raftlock_read_indexes_total",
		"Read indexes this node answered as leader for linearizable reads, by what confirmed its leadership: the asking follower counted as one of the majority (asker), or acknowledgments of heartbeats and appends alone (acks).", []string{"confirmed_by"}, nil)
	descFeature = prometheus.NewDesc("raftlock_feature_enabled",
		"1 if the cluster has enabled the feature (as this node applied the log), 0 if not yet; one series per feature this build has.", []string{"feature"}, nil)
)

// Describe sends the descriptions of every metric.
func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeaderChanges, descHasLeader, descLastContact, descFollowerLag, descFollowerContact,
		descApplyLag, descLastIndex, descStorageFailures, descSnapshots, descSnapshotIndex, descSnapshotTime, descSnapshotSize,
		descRestores, descRestoreSize, descRecovery, descRemoved, descReadIndexes, descFeature} {
		ch <- d
	}
	m := c.n.metrics
	m.appendLatency.Describe(ch)
	m.fsyncLatency.Describe(ch)
	m.snapshotLatency.Describe(ch)
	m.restoreLatency.Describe(ch)
}

// Collect reads every metric now.
func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	n, m := c.n, c.n.metrics
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	now := time.Now()
	counter(descLeaderChanges, m.leaderChanges.Load())
	_, leader := n.raft.LeaderWithID()
	gauge(descHasLeader, b2f(leader != ""))
	leads := n.raft.State() == raft.Leader
	contact := 0.0
	if !leads {
		last := n.raft.LastContact()
		if last.IsZero() {
			last = m.started
		}
		contact = now.Sub(last).Seconds()
	}
	gauge(descLastContact, contact)
	last := n.raft.LastIndex()
	gauge(descLastIndex, float64(last))
	if leads {
		if f := n.raft.GetConfiguration(); f.Error() == nil {
			for _, s := range f.Configuration().Servers {
				if string(s.ID) == n.cfg.ID {
					continue
				}
				match, seen := n.acks.progress(s.ID)
				if seen.IsZero() {
					seen = m.started
				}
				gauge(descFollowerLag, float64(last-min(match, last)), string(s.ID))
				gauge(descFollowerContact, now.Sub(seen).Seconds(), string(s.ID))
			}
		}
	}
	commit, applied := n.raft.CommitIndex(), n.AppliedIndex()
	gauge(descApplyLag, float64(commit-min(applied, commit)))
	counter(descStorageFailures, m.storageFailures.Load())
	counter(descSnapshots, m.snapshots.Load())
	counter(descRestores, m.restores.Load())
	counter(descReadIndexes, m.readIndexesByAsker.Load(), "asker")
	counter(descReadIndexes, m.readIndexesByAcks.Load(), "acks")
	m.mu.Lock()
	snapAt, snapIdx, snapSize, restoreSize, recovered := m.lastSnapshot, m.lastSnapshotIdx, m.lastSnapshotSize, m.lastRestoreSize, m.lastRecovery
	m.mu.Unlock()
	gauge(descSnapshotIndex, float64(snapIdx))
	gauge(descSnapshotTime, unixSeconds(snapAt))
	gauge(descSnapshotSize, float64(snapSize))
	gauge(descRestoreSize, float64(restoreSize))
	gauge(descRecovery, unixSeconds(recovered))
	gauge(descRemoved, b2f(n.IsRemoved()))
	enabled := n.fsm.Features()
	for _, f := range fsm.AllFeatures() {
		on := false
		for _, e := range enabled {
			on = on || e == f
		}
		gauge(descFeature, b2f(on), string(f))
	}
	m.appendLatency.Collect(ch)
	m.fsyncLatency.Collect(ch)
	m.snapshotLatency.Collect(ch)
	m.restoreLatency.Collect(ch)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// meteredSnapshots is the snapshot store that records each snapshot made durable.
type meteredSnapshots struct {
	raft.SnapshotStore
	m *nodeMetrics
}

// Create starts a snapshot whose sink records it once closed.
func (s meteredSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	start := time.Now()
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &meteredSink{SnapshotSink: sink, m: s.m, index: index, start: start}, nil
}

// meteredSink counts what is written to a snapshot and records it when it closes.
type meteredSink struct {
	raft.SnapshotSink
	m     *nodeMetrics
	index uint64
	start time.Time
	size  int64
}

func (s *meteredSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	s.size += int64(n)
	return n, err
}

// Close closes the snapshot and, if it is now durable, records it.
func (s *meteredSink) Close() error {
	err := s.SnapshotSink.Close()
	if err == nil {
		s.m.snapshotWritten(s.index, s.size, time.Since(s.start))
	}
	return err
}
