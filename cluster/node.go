package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tlsutil"
)

// Node is one member of a raftlock cluster.
type Node struct {
	cfg     Config
	log     hclog.Logger
	dirLock *dataDirLock // held from New until the node is closed
	raft    *raft.Raft
	fsm     *fsm.FSM
	store   logStore
	trans   *raft.NetworkTransport
	acks    *ackTransport // trans, recording what each peer accepted (see confirmer)
	events  *notifier
	timers  *leaderTimers
	verify  *confirmer
	gate    *featureGate
	stats   counters
	metrics *nodeMetrics

	// changes keeps the latest lock changes, for prefix watches.
	changes *changeLog
	// views wakes the streams of the sessions and cluster views.
	views *viewSignal

	// refusals logs refused Raft handshakes (with TLS).
	refusals *tlsutil.RefusalLog
	// httpc makes the node's own requests to other members' APIs (join, publish, leave).
	httpc *http.Client

	// readyTerm is the term in which this node leads and has passed the Barrier, with that
	// term's timers armed; 0 when it does not lead.
	readyTerm atomic.Uint64

	// proposals is held shared by every proposal while it enters raft's queue, and exclusively
	// by a restore from before it reads the holds it replaces until raft installed it: no
	// grant applies in between, unseen (see RestoreBackup).
	proposals sync.RWMutex

	// admitted, if set, is called by admit with the term a request was admitted in: a test
	// hook that stalls a request between its admission and its confirmation. Nil outside tests.
	admitted func(term uint64)

	// removed is set while this node counts as removed from the cluster; removedCh closes
	// the first time it does (see Removed).
	removed     atomic.Bool
	removedCh   chan struct{}
	removedOnce sync.Once
	// refuseOnce makes refuse stop the node once.
	refuseOnce sync.Once
	// featureSnap asks snapshotLoop for a snapshot: features were enabled.
	featureSnap chan struct{}
	// snapshotting holds a token while raft takes a snapshot this node asked for
	// (raft.Snapshot) or installs a restore (raft.Restore), from the request until raft
	// answered it: see userSnapshot.
	snapshotting chan struct{}

	leaderCh    chan bool
	stop        chan struct{}
	loops       context.Context // ends when the node closes; the background loops run in it
	cancelLoops context.CancelFunc
	wg          sync.WaitGroup
	closed      atomic.Bool

	// mux shares the Raft port with the API (Config.APIOnRaftPort); nil without it.
	mux *portMux

	// applyWake wakes WaitApplied after each applied batch; readLogs is raft's log (through
	// its cache), where ReadIndex looks up the entries' types (readindex.go).
	applyWake *applyWatch
	readLogs  raft.LogStore

	// chans is the peer channel (peerchan.go).
	chans *peerChannels
}

// New opens the stores in cfg.DataDir, starts Raft and, when the data directory is new and an
// initial cluster is given, bootstraps it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := mkdirAllDurable(cfg.DataDir, 0o750); err != nil {
		return nil, fmt.Errorf("cluster: data dir: %w", err)
	}
	dirLock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	kind, err := resolveLogStore(cfg.LogStore, cfg.DataDir)
	if err != nil {
		dirLock.release()
		return nil, err
	}
	cfg.LogStore = kind
	removeTransferFiles(cfg.DataDir)
	n := &Node{
		cfg:       cfg,
		dirLock:   dirLock,
		log:       cfg.Logger.Named("cluster"),
		events:    newNotifier(),
		changes:   newChangeLog(cfg.WatchHistoryBytes),
		views:     newViewSignal(),
		leaderCh:  make(chan bool, 16),
		stop:      make(chan struct{}),
		removedCh: make(chan struct{}),

		featureSnap:  make(chan struct{}, 1),
		snapshotting: make(chan struct{}, 1),
		metrics:      newNodeMetrics(),
		applyWake:    newApplyWatch(),
	}
	var opts []fsm.Option
	if cfg.Features != nil {
		opts = append(opts, fsm.WithFeatures(cfg.Features...))
	}
	n.fsm = fsm.New(n, opts...)
	n.timers = newLeaderTimers(n)
	n.gate = newFeatureGate(n, cfg.FeatureCheckInterval)
	n.httpc = newHTTPClient(cfg.TLS.HTTPClient)
	n.chans = newPeerChannels(n)
	n.HandleChannel(ChannelReadIndex, n.serveReadIndex)

	if err := n.open(); err != nil {
		n.closeResources()
		return nil, err
	}
	n.verify = newConfirmer(n.raft, raft.ServerID(cfg.ID), n.acks, n.stop)
	ctx, cancel := context.WithCancel(context.Background())
	n.loops, n.cancelLoops = ctx, cancel
	if n.mux != nil && n.mux.chans != nil {
		n.chans.wg.Add(1)
		go n.chans.accept(n.mux.chans)
	}
	n.wg.Add(5)
	go n.monitorLeadership()
	go n.publishLoop(ctx)
	go n.gate.run(ctx)
	go n.watchRemoval(ctx)
	go n.snapshotLoop(ctx)
	return n, nil
}

func (n *Node) open() error {
	cfg := n.cfg
	ln := cfg.RaftListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return fmt.Errorf("cluster: raft listen: %w", err)
		}
	}
	adv := ln.Addr()
	if cfg.AdvertiseRaft != "" {
		a, err := advertisedAddr(cfg.AdvertiseRaft)
		if err != nil {
			ln.Close()
			return err
		}
		adv = a
	}
	stream := &streamLayer{Listener: ln, advertise: adv}
	if cfg.TLS.RaftServer != nil {
		n.refusals = tlsutil.NewRefusalLog(n.log, hclog.Warn, "refused a Raft connection: TLS handshake failed")
		stream.Listener = tlsutil.NewListener(ln, cfg.TLS.RaftServer, tlsutil.ListenerOptions{OnRefused: n.refusedPeer,
			MaxHandshakes: cfg.TLS.MaxHandshakes, MaxHandshakesPerHost: (cfg.TLS.MaxHandshakes + 3) / 4})
		stream.dialTLS = cfg.TLS.RaftClient
	}
	if cfg.APIOnRaftPort {
		n.mux = newPortMux(stream.Listener, n.chans.serves)
		stream.Listener = n.mux.raft
	}
	tcfg := &raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: 5,
		Timeout: 10 * time.Second,
		// One RPC in flight per follower turns raft's pipelined replication off. Its pipeline
		// can wedge for good once a follower answers an append with Success=false (after a
		// leader change, say): the decoder stops reading while the sender parks on a full
		// hand-off channel, so that follower never gets another entry and Shutdown waits
		// forever (hashicorp/raft#612; seen here as a dev cluster whose Close never returned).
		// Plain replication still sends up to MaxAppendEntries entries per request, and with
		// one append in flight a follower syncs once for all that arrived meanwhile: measured
		// faster than the pipeline, even one that cannot wedge (docs/performance.md).
		MaxRPCsInFlight: 1,
		Logger:          cfg.Logger.Named("raft-net"),
	}
	if len(cfg.PeerAddrs) > 0 {
		tcfg.ServerAddressProvider = peerOverrides(cfg.PeerAddrs)
	}
	n.trans = raft.NewNetworkTransportWithConfig(tcfg)
	n.acks = newAckTransport(n.trans)

	opened, err := openLogStore(cfg.LogStore, cfg.DataDir, cfg.WALSegmentSize, cfg.UnsafeNoLogFsync, n.metrics.fsyncLatency.Observe, cfg.Logger)
	if err != nil {
		return err
	}
	if cfg.UnsafeNoLogFsync {
		n.log.Warn("UNSAFE: the Raft log is not fsynced (a test-only switch): a power cut loses acknowledged writes")
	}
	store := &failStopStore{logStore: opened, onFail: n.storageFailed, metrics: n.metrics}
	n.store = store
	files, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, cfg.Logger.Named("snapshot"))
	if err != nil {
		return fmt.Errorf("cluster: open snapshot store: %w", err)
	}
	// The stores made their files and directories (wal/ or raft.db, snapshots/) in the data
	// directory; they last only once it is synced.
	if err := syncDir(cfg.DataDir); err != nil {
		return err
	}
	snaps := sizedSnapshots{meteredSnapshots{SnapshotStore: durableSnapshots{SnapshotStore: files, dir: filepath.Join(cfg.DataDir, "snapshots")}, m: n.metrics}}
	n.metrics.loadSnapshot(snaps)
	n.metrics.loadRecovered(cfg.DataDir)
	replay := newReplayCache(store)
	logs, err := raft.NewLogCache(1024, replay)
	if err != nil {
		return fmt.Errorf("cluster: log cache: %w", err)
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = 256
	rc.NotifyCh = n.leaderCh
	rc.Logger = cfg.Logger.Named("raft")
	rc.NoLegacyTelemetry = true

	existing, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return fmt.Errorf("cluster: inspect raft state: %w", err)
	}
	if !existing {
		// Before raft runs: a refused node must not take a byte of the log, nor a vote.
		if n.mux != nil {
			n.mux.apiClosed.Store(true) // nobody serves the API yet
		}
		err := n.checkNewMember(context.Background())
		if n.mux != nil {
			n.mux.apiClosed.Store(false)
		}
		if err != nil {
			return err
		}
	}
	if !existing && len(cfg.InitialCluster) > 0 {
		var servers []raft.Server
		for id, addr := range cfg.InitialCluster {
			if id == cfg.ID {
				addr = string(adv.String())
			}
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
		}
		sortServers(servers)
		if err := raft.BootstrapCluster(rc, logs, store, snaps, n.acks, raft.Configuration{Servers: servers}); err != nil {
			return fmt.Errorf("cluster: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new cluster", "members", len(servers))
	}
	var machine raft.BatchingFSM = n.fsm
	restore := beginStartupRestore(n.fsm, snaps, n.log)
	if restore != nil {
		rc.NoSnapshotRestoreOnStart = true
		machine = gatedFSM{FSM: n.fsm, restore: restore}
	}
	machine = haltingFSM{BatchingFSM: machine, state: n.fsm, onHalt: n.refuse}
	machine = wakingFSM{BatchingFSM: machine, w: n.applyWake}
	n.readLogs = logs
	replay.startFilling() // NewRaft reads the log after the snapshot; it is applied soon after
	r, err := raft.NewRaft(rc, machine, logs, store, snaps, n.acks)
	replay.stopFilling()
	if err != nil {
		if restore != nil {
			_ = restore.wait()
		}
		return fmt.Errorf("cluster: start raft: %w", err)
	}
	if restore != nil {
		if err := restore.wait(); err != nil {
			// raft holds an index the state machine never reached: stop it before anyone reads.
			_ = r.Shutdown().Error()
			if errors.Is(err, fsm.ErrNewerFormat) {
				err = needsNewer(err)
			}
			return err
		}
	}
	r.RegisterObserver(raft.NewObserver(nil, false, n.metrics.observeLeader))
	r.RegisterObserver(raft.NewObserver(nil, false, n.views.observeLeader))
	n.raft = r
	return nil
}

// closeResources closes what open() managed to open, after raft (if any) has stopped.
func (n *Node) closeResources() {
	if n.trans != nil {
		n.trans.Close() // closes the accepted connections too (streamLayer.Close)
		// Close leaves the pooled outbound connections open until the garbage collector finds
		// them; close them now, so that the peers' goroutines serving them end at once.
		n.trans.CloseStreams()
	}
	if n.store != nil {
		n.store.Close()
	}
	n.httpc.CloseIdleConnections()
	n.chans.close()
	n.dirLock.release()
}

// refusedPeer counts an incoming Raft connection whose TLS handshake failed, and logs it,
// bounded and rate-limited (tlsutil.RefusalLog): anyone who reaches the port can cause one.
func (n *Node) refusedPeer(remote net.Addr, err error) {
	n.stats.raftTLSRefused.Add(1)
	n.refusals.Log(remote, err)
}

// Close stops the node at once, as a crash would from the cluster's point of view (without
// leadership transfer); acknowledged commands are already durable in the log.
func (n *Node) Close() error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(n.stop)
	n.chans.shut() // before the handlers' contexts end: they answer nothing more
	n.cancelLoops()
	err := n.raft.Shutdown().Error()
	n.wg.Wait()
	n.timers.deactivate()
	n.events.closeAll()
	n.views.close()
	n.changes.wakeAll(true)
	n.closeResources()
	return err
}

// Shutdown transfers leadership away if this node leads, snapshots what was applied since the
// last snapshot, then closes the node. The snapshot spares the next start the replay of the log
// behind it. Whatever is still running when ctx ends is cut off; Close is the crash path.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.raft.State() == raft.Leader && n.hasOtherVoters() {
		if _, err := await(ctx, n.raft.LeadershipTransfer()); err != nil {
			n.log.Warn("leadership transfer before shutdown failed", "error", err)
		}
	}
	start := time.Now()
	switch done, err := n.userSnapshot(ctx.Done()); {
	case !done:
		n.log.Warn("snapshot before shutdown cut off; the next start replays the log", "error", ctx.Err())
	case err == nil:
		n.log.Info("snapshot taken for shutdown", "took", time.Since(start))
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
	default:
		n.log.Warn("snapshot before shutdown failed; the next start replays the log", "error", err)
	}
	return n.Close()
}

// userSnapshot has raft take a snapshot, never while it takes another that this node asked
// for or installs a restore (installRestore): hashicorp/raft (v1.7.2) takes a snapshot on its
// snapshot goroutine and a restore on its main one, and a snapshot whose state was captured
// before a restore but that completes after it sets raft's last snapshot back below the
// restore's index. The leader then no longer finds the entry before the restore's no-op in
// its log nor at its snapshot, so it sends its followers the restored snapshot again and
// again: the no-op never commits and the restore never returns (seen as a restore that hung
// beside the snapshot taken when features are enabled). Raft's own snapshots (by
// SnapshotThreshold) and a follower's install of the leader's are outside this token, as they
// were before. done=false means stop closed before the snapshot ended (or began); raft's
// answer still releases the token.
func (n *Node) userSnapshot(stop <-chan struct{}) (done bool, err error) {
	select {
	case n.snapshotting <- struct{}{}:
	case <-stop:
		return false, nil
	}
	f := n.raft.Snapshot()
	ch := make(chan error, 1)
	go func() {
		// Raft answers every snapshot it took from the queue, at the latest when it shuts down.
		err := f.Error()
		<-n.snapshotting
		ch <- err
	}()
	select {
	case err := <-ch:
		return true, err
	case <-stop:
		return false, nil
	}
}

// await waits for f or for the end of ctx, whichever comes first. It reports done=false with
// ctx's error when ctx ended first, and f's outcome otherwise.
func await(ctx context.Context, f raft.Future) (done bool, err error) {
	if done, err = awaitUntil(ctx.Done(), f); !done {
		return false, ctx.Err()
	}
	return true, err
}

// awaitUntil waits for f or until stop closes, whichever comes first; done=false means stop
// closed first. Raft drops the requests it buffered, unanswered, when it shuts down, so every
// wait on one of its futures needs such a way out. The goroutine that waits on f outlives a
// wait that stop ended, for good if raft never answers.
func awaitUntil(stop <-chan struct{}, f raft.Future) (done bool, err error) {
	ch := make(chan error, 1)
	go func() { ch <- f.Error() }()
	select {
	case err := <-ch:
		return true, err
	case <-stop:
		return false, nil
	}
}

func (n *Node) hasOtherVoters() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.cfg.ID {
			return true
		}
	}
	return false
}

// ID returns this node's id.
func (n *Node) ID() string { return n.cfg.ID }

// FSM returns the node's state machine, for local (stale) reads.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// Raft returns the underlying raft instance, for embedders that need more than Node offers.
func (n *Node) Raft() *raft.Raft { return n.raft }

// IsLeader reports whether this node is the leader and ready to serve leader-only requests: it
// leads in the very term whose Barrier it passed and whose timers it armed.
func (n *Node) IsLeader() bool {
	term := n.readyTerm.Load()
	return term != 0 && n.raft.State() == raft.Leader && n.raft.CurrentTerm() == term
}

// Leader returns the id of the current leader and its published HTTP address; both are empty
// when no leader is known, and the address is empty until the leader has published it.
func (n *Node) Leader() (id, httpAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	m, _ := n.fsm.Member(string(lid))
	return string(lid), m.HTTPAddr
}

// AppliedIndex returns the last log index applied to the state machine on this node. Raft sets
// its own counter after handing entries to the state machine's goroutine, from a different
// goroutine than the one that answers a proposal, so it can briefly lag (or lead) the state;
// the state machine's own count covers the lag, so that a response never reports an index
// below that of the command it executed.
func (n *Node) AppliedIndex() uint64 { return max(n.raft.AppliedIndex(), n.fsm.AppliedIndex()) }

// WaitLeader blocks until this node knows a leader that has published its HTTP address, or ctx ends.
func (n *Node) WaitLeader(ctx context.Context) (id, httpAddr string, err error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		// This node counts once it is past its Barrier; another once it has published its address.
		if id, addr := n.Leader(); id == n.cfg.ID && n.IsLeader() || id != n.cfg.ID && id != "" && addr != "" {
			return id, addr, nil
		}
		select {
		case <-ctx.Done():
			return "", "", fmt.Errorf("%w: %w", ErrNoLeader, ctx.Err())
		case <-n.stop:
			return "", "", ErrShutdown
		case <-t.C:
		}
	}
}

// readyWait bounds how long Ready waits for the state machine to reach the commit index.
const readyWait = time.Second

// Ready reports whether the node knows a leader, the cluster serves by the rules of every
// feature all its members support (gateSettled: a new cluster is not ready until its leader
// has enabled them), and the node has applied everything it knew committed when asked. Under
// load entries commit while earlier ones apply, so it waits (up to readyWait, or until ctx
// ends) for the state machine to reach the commit index it read: a node that keeps up is
// ready, one still restoring a snapshot or replaying its log is not.
func (n *Node) Ready(ctx context.Context) bool { return n.NotReady(ctx) == "" }

// NotReady is Ready that says why not: "" when the node is ready, else the reason.
func (n *Node) NotReady(ctx context.Context) string {
	if n.removed.Load() {
		return "this node was removed from the cluster"
	}
	if id, _ := n.Leader(); id == "" {
		return "this node knows no leader"
	}
	if !n.gateSettled(ctx) {
		return "the cluster has not enabled the features its members support yet: its leader is still asking them, " +
			"or has not heard from every member (see GET /v1/cluster)"
	}
	commit := n.raft.CommitIndex()
	if n.AppliedIndex() >= commit {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for n.AppliedIndex() < commit {
		select {
		case <-ctx.Done():
			return fmt.Sprintf("this node has applied the log up to index %d, not yet to the commit index %d", n.AppliedIndex(), commit)
		case <-n.stop:
			return "this node is shutting down"
		case <-t.C:
		}
	}
	return ""
}

// FeatureGate says, on the leader, whether its feature gate has settled: "settled" once it
// heard from every member and found nothing left to enable, "pending" before; "" on a node
// that does not lead (only the leader asks the members).
func (n *Node) FeatureGate() string {
	switch {
	case !n.IsLeader():
		return ""
	case n.gate.settled.Load():
		return "settled"
	}
	return "pending"
}

// errClosed is returned by waits that end because the node closed.
var errClosed = errors.New("cluster: node closed")
