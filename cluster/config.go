package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/fsm"
)

// Config configures a Node. Zero durations and counts take the defaults below.
type Config struct {
	// ID is this node's unique, stable name (e.g. "n1").
	ID string
	// DataDir holds the log and stable store (see LogStore) and the snapshots.
	DataDir string
	// LogStore names the Raft log and stable store of a new data directory: LogStoreWAL (a
	// wal/ directory) or LogStoreBoltDB (raft.db); empty means DefaultLogStore. A data
	// directory keeps the store it was made with: empty opens whichever it holds, and naming
	// the other one is refused.
	LogStore string
	// WALSegmentSize is the size at which LogStoreWAL starts a new segment file; 0 keeps
	// raft-wal's 64 MiB. Compaction deletes whole segments only, so older entries stay
	// readable until their segment is entirely behind the snapshot.
	WALSegmentSize int
	// RaftListener, if set, is the bound listener for Raft traffic; otherwise RaftAddr is bound.
	RaftListener net.Listener
	// RaftAddr is the address to bind for Raft traffic when RaftListener is nil.
	RaftAddr string
	// AdvertiseRaft is the Raft address other nodes reach this one at; default the bound address.
	AdvertiseRaft string
	// AdvertiseHTTP is the HTTP address this node publishes for forwarding and clients.
	AdvertiseHTTP string
	// APIOnRaftPort also accepts HTTP connections on the Raft listener and hands them out
	// through Node.APIListener, so that a node needs one port: advertise the Raft address as
	// AdvertiseHTTP and serve the API there (what package embed does). With TLS they pass the
	// Raft port's mutual TLS first, so only members reach the API there.
	APIOnRaftPort bool
	// InitialCluster maps node ids to Raft addresses; used to bootstrap only when DataDir holds no
	// Raft state yet. Leave empty to join an existing cluster.
	InitialCluster map[string]string
	// Join lists the API endpoints of the cluster this node will join (Node.Join). With a
	// data directory that holds no Raft state, New first asks them whether the cluster counts
	// this id as a voter already, and refuses with ErrAlreadyBootstrapped if so.
	Join []string
	// PeerAddrs overrides the address this node dials for some peers (a fault-injection hook).
	PeerAddrs map[string]string
	// ClockOffset is added to the wall-clock readings this node writes into commands (a
	// fault-injection hook for clock skew; timers run on the monotonic clock and ignore it).
	ClockOffset time.Duration

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64
	// ApplyTimeout bounds how long a proposal may wait to enter the leader's queue.
	ApplyTimeout time.Duration
	// WatchHistoryBytes bounds the memory of the node's log of recent lock changes, from which
	// prefix watches are answered; default DefaultWatchHistoryBytes. A watch from an index
	// older than the log's oldest change is answered the whole prefix instead.
	WatchHistoryBytes int

	// Token is the ACL token sent (as X-Raftlock-Token) with the requests this node makes to
	// other members' APIs: joining, publishing its HTTP address, leaving. With ACLs on they
	// need operator:write; without it they are refused and a follower's address stays
	// unpublished until it leads.
	Token string

	// TLS, if set, encrypts and authenticates the node's traffic with other nodes.
	TLS TLS

	// Version is the version this node reports to the others (GET /v1/health, /v1/cluster).
	Version string
	// Features, if not nil, restricts the features this node supports to these, as if it were
	// an older version: it does not report the others, and stops on an entry that uses one.
	// For tests of rolling upgrades; nil supports every feature of fsm.AllFeatures.
	Features []fsm.Feature
	// FeatureCheckInterval is how often the leader asks the members which features they
	// support, to enable those that all of them do; default DefaultFeatureCheckInterval.
	FeatureCheckInterval time.Duration
	// RemovalGrace is how long the node must be missing from its own configuration, or hear
	// no leader, before it counts as removed or asks the others whether it still is a member;
	// default the larger of 5 s and ten election timeouts.
	RemovalGrace time.Duration

	// Logger receives the node's and raft's logs; default discards.
	Logger hclog.Logger

	// OnStorageFailure, if set, is called (once, before the error reaches raft) when a write
	// to the Raft log or stable store fails, after the node has logged why; it should stop the
	// process at once (the agent exits). If nil, the node closes itself. Either way the node
	// never writes again: a retried fsync can succeed without the data of the failed one.
	OnStorageFailure func(error)
	// OnRefusal, if set, is called once when the node must stop for a reason a restart of the
	// same version cannot cure: its log holds an entry only a newer version can apply
	// (ErrNeedsNewerVersion). It should stop the process (the agent exits with its refusal
	// status). If nil, the node closes itself.
	OnRefusal func(error)
	// UnsafeSkipRejoinCheck starts the node on an empty data directory without asking the
	// others whether the cluster counts it already (see ErrAlreadyBootstrapped): a lost disk
	// then comes back as a voter that forgot its votes. For the harness's self-test only.
	UnsafeSkipRejoinCheck bool
	// UnsafeNoLogFsync skips the fsync of the Raft log's appends (and, with LogStoreBoltDB, of
	// the stable store): acknowledged writes are lost to a power cut. For tests that must see
	// the harness catch it; never for users.
	UnsafeNoLogFsync bool
	// UnsafeRestoreKeepsSessions makes a restore keep the backup's sessions with their holds,
	// as restores did before they ended every session: clients then go on believing holds the
	// restore changed. For the harness's self-test only; never for users.
	UnsafeRestoreKeepsSessions bool
}

// TLS holds the TLS configurations of a node's traffic with other nodes; nil ones leave that
// traffic in plain text. The configurations decide whom to trust (see package tlsutil for the
// agent's): the node only applies them.
type TLS struct {
	// RaftServer and RaftClient carry Raft over TLS, for the connections peers open to this
	// node and those it opens to them; give both or neither. An incoming connection whose
	// handshake fails is closed before Raft reads anything from it.
	RaftServer, RaftClient *tls.Config
	// HTTPClient makes the node's own requests to other members' APIs (join, publishing its
	// address, leave) use HTTPS with this configuration; endpoints without a scheme get https.
	HTTPClient *tls.Config
	// MaxHandshakes bounds the incoming Raft connections whose TLS handshake is in progress,
	// and a quarter of it those from one IP address; more are closed at once (0: no bound).
	// A connection that has not finished its handshake within 10s is closed too.
	MaxHandshakes int
}

// Defaults for Config. The timeouts suit a LAN or loopback: a crashed leader is replaced in
// about one to two election timeouts.
const (
	DefaultHeartbeatTimeout   = 500 * time.Millisecond
	DefaultElectionTimeout    = 500 * time.Millisecond
	DefaultLeaderLeaseTimeout = 500 * time.Millisecond
	DefaultCommitTimeout      = 20 * time.Millisecond
	DefaultSnapshotThreshold  = 16384
	DefaultSnapshotInterval   = 5 * time.Second
	DefaultTrailingLogs       = 10240
	DefaultApplyTimeout       = 5 * time.Second
)

func (c *Config) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	def(&c.ElectionTimeout, DefaultElectionTimeout)
	def(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	def(&c.CommitTimeout, DefaultCommitTimeout)
	def(&c.SnapshotInterval, DefaultSnapshotInterval)
	def(&c.ApplyTimeout, DefaultApplyTimeout)
	def(&c.FeatureCheckInterval, DefaultFeatureCheckInterval)
	def(&c.RemovalGrace, max(5*time.Second, 10*c.ElectionTimeout))
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
}

func (c *Config) validate() error {
	if c.ID == "" {
		return errors.New("cluster: config: ID is required")
	}
	if c.DataDir == "" {
		return errors.New("cluster: config: DataDir is required")
	}
	if c.RaftListener == nil && c.RaftAddr == "" {
		return errors.New("cluster: config: RaftAddr or RaftListener is required")
	}
	if c.AdvertiseHTTP == "" {
		return errors.New("cluster: config: AdvertiseHTTP is required")
	}
	if (c.TLS.RaftServer == nil) != (c.TLS.RaftClient == nil) {
		return errors.New("cluster: config: TLS.RaftServer and TLS.RaftClient go together")
	}
	if c.LogStore != "" && c.LogStore != LogStoreBoltDB && c.LogStore != LogStoreWAL {
		return fmt.Errorf("cluster: config: log store %q is not %q or %q", c.LogStore, LogStoreBoltDB, LogStoreWAL)
	}
	if len(c.InitialCluster) > 0 {
		if _, ok := c.InitialCluster[c.ID]; !ok {
			return fmt.Errorf("cluster: config: initial cluster does not name this node %q", c.ID)
		}
	}
	return nil
}
