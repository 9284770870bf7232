package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// Timing for tests: short enough that a dead leader is replaced in a second or two, long
// enough that a follower busy with fsyncs on a slow, shared machine is not taken for dead (a
// lease of 100 ms made leaders step down spuriously there).
const (
	testHeartbeat = 500 * time.Millisecond
	testElection  = 500 * time.Millisecond
	testLease     = 400 * time.Millisecond

	// longTTL is for sessions whose expiry a test does not look at.
	longTTL = time.Minute
	// opTimeout bounds one Node call in a test.
	opTimeout = 10 * time.Second
	// leaderTimeout bounds the wait for a leader; generous, because the test machine is slow and
	// shared.
	leaderTimeout = 15 * time.Second
)

// testCluster is a cluster of real nodes in this process: Raft over TCP on 127.0.0.1, bbolt
// stores in t.TempDir(). Each node keeps its Raft address, data directory and HTTP address
// across kill and restart. The HTTP address is a tiny server that accepts the one request a
// Node makes by itself — a follower publishing its address to the leader — so that the
// membership metadata fills in as it would in production.
type testCluster struct {
	t     testing.TB
	ids   []string
	addrs []string // Raft addresses
	dirs  []string
	https []*httptest.Server
	tune  func(*cluster.Config)

	mu    sync.Mutex
	nodes []*cluster.Node // nil while stopped
}

// newTestCluster starts size nodes that bootstrap one cluster together. tune, if set, adjusts
// every node's config before it starts.
func newTestCluster(t testing.TB, size int, tune func(*cluster.Config)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, tune: tune, nodes: make([]*cluster.Node, size)}
	lns := make([]net.Listener, size)
	for i := range size {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		c.ids = append(c.ids, fmt.Sprintf("n%d", i+1))
		c.addrs = append(c.addrs, ln.Addr().String())
		c.dirs = append(c.dirs, filepath.Join(t.TempDir(), c.ids[i]))
		srv := httptest.NewServer(c.memberHandler(i))
		c.https = append(c.https, srv)
		t.Cleanup(srv.Close) // runs after the nodes are closed (cleanups run last-in first-out)
	}
	t.Cleanup(c.closeAll)
	// All at once, as machines come up: a node with a new data directory asks the others
	// whether the cluster counts it before it bootstraps, and a listener whose node has not
	// started yet would hold the question until its timeout.
	if err := c.startAll(lns); err != nil {
		t.Fatal(err)
	}
	return c
}

// memberHandler serves POST /v1/cluster/members, GET /v1/health, GET /v1/ready and GET
// /v1/cluster for node i, as httpapi would.
func (c *testCluster) memberHandler(i int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/health" {
			c.health(i, w)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/v1/cluster" {
			c.clusterView(i, w)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/v1/ready" {
			if n := c.node(i); n == nil || !n.Ready(r.Context()) {
				http.Error(w, "not ready", http.StatusServiceUnavailable)
			}
			return
		}
		var req api.AddMemberRequest
		if r.Method != http.MethodPost || r.URL.Path != "/v1/cluster/members" {
			http.NotFound(w, r)
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		n := c.node(i)
		if n == nil {
			http.Error(w, "stopped", http.StatusServiceUnavailable)
			return
		}
		if err := n.AddMember(r.Context(), req.ID, req.RaftAddr, req.HTTPAddr); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"members":[]}`))
	})
}

// health answers GET /v1/health for node i as the API does: what the leader's feature gate
// asks every member.
func (c *testCluster) health(i int, w http.ResponseWriter) {
	n := c.node(i)
	if n == nil {
		http.Error(w, "stopped", http.StatusServiceUnavailable)
		return
	}
	h := api.Health{Status: "ok", ID: n.ID(), Version: n.Version(), AppliedIndex: n.FSM().AppliedIndex(), Suffrage: n.OwnSuffrage()}
	for _, f := range n.SupportedFeatures() {
		h.Features = append(h.Features, string(f))
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h)
}

// clusterView answers GET /v1/cluster for node i with the leader's view, as the API does by
// forwarding to the leader; a node that does not lead answers 503 here.
func (c *testCluster) clusterView(i int, w http.ResponseWriter) {
	n := c.node(i)
	if n == nil || !n.IsLeader() {
		http.Error(w, "not the leader", http.StatusServiceUnavailable)
		return
	}
	ms, err := n.Members()
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	out := api.Cluster{Leader: n.ID()}
	for _, m := range ms {
		out.Members = append(out.Members, api.Member{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func (c *testCluster) config(i int, ln net.Listener) cluster.Config {
	initial := make(map[string]string)
	for j, id := range c.ids {
		initial[id] = c.addrs[j]
	}
	cfg := cluster.Config{
		ID:                 c.ids[i],
		DataDir:            c.dirs[i],
		RaftListener:       ln,
		AdvertiseHTTP:      c.https[i].Listener.Addr().String(),
		InitialCluster:     initial,
		HeartbeatTimeout:   testHeartbeat,
		ElectionTimeout:    testElection,
		LeaderLeaseTimeout: testLease,
		CommitTimeout:      5 * time.Millisecond,
		Logger:             testLogger(c.ids[i]),
		// Check often: tests wait for the features every member supports to be enabled.
		FeatureCheckInterval: 100 * time.Millisecond,
		// Removed nodes find out sooner than by default (5 s).
		RemovalGrace: time.Second,
		// Empty is the default store; CI also runs these tests with boltdb.
		LogStore: os.Getenv("RAFTLOCK_TEST_LOG_STORE"),
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

// testLogger discards logs unless RAFTLOCK_TEST_LOG names a level (e.g. "debug").
func testLogger(name string) hclog.Logger {
	level := os.Getenv("RAFTLOCK_TEST_LOG")
	if level == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(level), Output: os.Stderr})
}

func (c *testCluster) start(i int, ln net.Listener) {
	c.t.Helper()
	n, err := cluster.New(c.config(i, ln))
	if err != nil {
		ln.Close()
		c.t.Fatalf("start %s: %v", c.ids[i], err)
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
}

// node returns node i, or nil while it is stopped.
func (c *testCluster) node(i int) *cluster.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// kill closes node i at once, without leadership transfer: a crash, as far as the others see.
func (c *testCluster) kill(i int) {
	c.t.Helper()
	if err := c.detach(i).Close(); err != nil {
		c.t.Logf("close %s: %v", c.ids[i], err)
	}
}

// stop shuts node i down gracefully, as on SIGTERM: leadership transfer, snapshot, close.
func (c *testCluster) stop(i int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := c.detach(i).Shutdown(ctx); err != nil {
		c.t.Errorf("shut down %s: %v", c.ids[i], err)
	}
}

// detach takes running node i out of the cluster's list, for kill or stop.
func (c *testCluster) detach(i int) *cluster.Node {
	c.t.Helper()
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n == nil {
		c.t.Fatalf("stop %s: not running", c.ids[i])
	}
	return n
}

// restart starts node i again from its data directory, on its old Raft address.
func (c *testCluster) restart(i int) {
	c.t.Helper()
	c.start(i, c.listen(i))
}

// listen binds node i's old Raft address again, waiting while the old socket lets go of it.
func (c *testCluster) listen(i int) net.Listener {
	c.t.Helper()
	var ln net.Listener
	testkit.Eventually(c.t, 10*time.Second, "listen on "+c.addrs[i], func() bool {
		var err error
		ln, err = net.Listen("tcp", c.addrs[i])
		return err == nil
	})
	return ln
}

// restartAll starts every stopped node again from its data directory at the same time, as the
// machines of a real cluster would come back, and returns when all are open.
func (c *testCluster) restartAll() {
	c.t.Helper()
	lns := make([]net.Listener, len(c.ids))
	for i := range c.ids {
		lns[i] = c.listen(i)
	}
	if err := c.startAll(lns); err != nil {
		c.t.Fatal(err)
	}
}

// startAll starts node i on lns[i] for every node at the same time and returns when all are
// open, with the errors of those that did not start.
func (c *testCluster) startAll(lns []net.Listener) error {
	errs := make([]error, len(c.ids))
	var wg sync.WaitGroup
	for i := range c.ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := cluster.New(c.config(i, lns[i]))
			if err != nil {
				lns[i].Close()
				errs[i] = fmt.Errorf("start %s: %w", c.ids[i], err)
				return
			}
			c.mu.Lock()
			c.nodes[i] = n
			c.mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *testCluster) closeAll() {
	for i := range c.nodes {
		c.mu.Lock()
		n := c.nodes[i]
		c.nodes[i] = nil
		c.mu.Unlock()
		if n != nil {
			n.Close()
		}
	}
}

// running returns the indexes of the running nodes.
func (c *testCluster) running() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, n := range c.nodes {
		if n != nil {
			out = append(out, i)
		}
	}
	return out
}

// currentLeader returns the running node that leads and is ready, or nil; it never fails the
// test, so goroutines may use it.
func (c *testCluster) currentLeader() *cluster.Node {
	var best *cluster.Node
	for _, i := range c.running() {
		n := c.node(i)
		if n != nil && n.IsLeader() && (best == nil || n.Raft().CurrentTerm() > best.Raft().CurrentTerm()) {
			best = n
		}
	}
	return best
}

// waitLeader waits until a running node leads and is ready to serve, and returns it.
func (c *testCluster) waitLeader() (int, *cluster.Node) {
	c.t.Helper()
	var n *cluster.Node
	testkit.Eventually(c.t, leaderTimeout, "a ready leader", func() bool {
		n = c.currentLeader()
		return n != nil
	})
	return indexOf(c.ids, n.ID()), n
}

func indexOf(ids []string, id string) int {
	for i, x := range ids {
		if x == id {
			return i
		}
	}
	return -1
}

// followers returns the running nodes other than leader.
func (c *testCluster) followers(leader int) []int {
	var out []int
	for _, i := range c.running() {
		if i != leader {
			out = append(out, i)
		}
	}
	return out
}

// waitPublished waits until the leader's state machine holds every member's HTTP address, and
// the features that every running member supports are enabled (the leader enables them once
// it can ask every member), so that no later change to the state comes from either.
func (c *testCluster) waitPublished(leader *cluster.Node) {
	c.t.Helper()
	testkit.Eventually(c.t, leaderTimeout, "every member to publish its address", func() bool {
		ms, err := leader.Members()
		if err != nil || len(ms) != len(c.ids) {
			return false
		}
		for _, m := range ms {
			if m.HTTPAddr == "" {
				return false
			}
		}
		return true
	})
	testkit.Eventually(c.t, leaderTimeout, "the features every member supports to be enabled", func() bool {
		shared := fsm.AllFeatures()
		for _, i := range c.running() {
			if n := c.node(i); n != nil {
				shared = slices.DeleteFunc(shared, func(f fsm.Feature) bool { return !slices.Contains(n.SupportedFeatures(), f) })
			}
		}
		return len(leader.FSM().Features()) >= len(shared)
	})
}

// waitConverged waits until every running node has applied the whole log and their state
// machines hold byte-identical snapshots, and returns that snapshot.
//
// It compares the state itself rather than raft's applied index: raft advances that index
// when it hands entries to the state machine's goroutine, before they are applied, so equal
// indexes do not yet mean equal states.
func (c *testCluster) waitConverged() []byte {
	c.t.Helper()
	var snap []byte
	testkit.Eventually(c.t, leaderTimeout, "every node to reach the same state", func() bool {
		snap = nil
		var index uint64
		for k, i := range c.running() {
			n := c.node(i)
			if n == nil {
				return false
			}
			b, ai, li := snapshotBytes(c.t, n), n.Raft().AppliedIndex(), n.Raft().LastIndex()
			if ai != li || k > 0 && (ai != index || !bytes.Equal(b, snap)) {
				return false
			}
			snap, index = b, ai
		}
		return true
	})
	return snap
}

// opContext returns a context for one Node call.
func opContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	t.Cleanup(cancel)
	return ctx
}

// createSession creates a session on the leader n and fails the test on an error.
func createSession(t testing.TB, n *cluster.Node, name string, ttl, lockDelay time.Duration) fsm.SessionID {
	t.Helper()
	s, err := n.CreateSession(opContext(t), name, ttl, lockDelay)
	if err != nil {
		t.Fatalf("create session %q on %s: %v", name, n.ID(), err)
	}
	return s.ID
}

// mustAcquire try-acquires lock for session on the leader n and fails the test unless granted.
func mustAcquire(t testing.TB, n *cluster.Node, session fsm.SessionID, lock, value string) uint64 {
	t.Helper()
	res, err := n.Acquire(opContext(t), cluster.AcquireRequest{Session: session, Lock: lock, Value: value, SetValue: value != ""})
	if err != nil {
		t.Fatalf("acquire %q: %v", lock, err)
	}
	if res.Status != fsm.StatusOK || res.Token == 0 {
		t.Fatalf("acquire %q: status %v token %d, want a grant", lock, res.Status, res.Token)
	}
	return res.Token
}

// mustRelease releases lock on the leader n, fails the test unless it was released, and
// returns the Result (whose Index is the token of a waiter granted by the release).
func mustRelease(t testing.TB, n *cluster.Node, session fsm.SessionID, lock string, token uint64) fsm.Result {
	t.Helper()
	res, err := n.Release(opContext(t), session, lock, token, cluster.Attempt{})
	if err != nil || res.Status != fsm.StatusOK {
		t.Fatalf("release %q token %d: status %v, err %v", lock, token, res.Status, err)
	}
	return res
}

// releaseAtLeader releases at whichever node leads, asking again where a leadership change
// refused the release (ErrNotLeader alone: nothing was applied). For tests that wait long
// enough for a loaded machine to change leaders on its own.
func (c *testCluster) releaseAtLeader(session fsm.SessionID, lock string, token uint64) fsm.Result {
	c.t.Helper()
	var res fsm.Result
	testkit.Eventually(c.t, leaderTimeout, "a leader that takes the release", func() bool {
		n := c.currentLeader()
		if n == nil {
			return false
		}
		r, err := n.Release(opContext(c.t), session, lock, token, cluster.Attempt{})
		if errors.Is(err, cluster.ErrNotLeader) && !errors.Is(err, cluster.ErrUnknownOutcome) {
			return false
		}
		if err != nil || r.Status != fsm.StatusOK {
			c.t.Fatalf("release %q token %d at %s: status %v, err %v", lock, token, n.ID(), r.Status, err)
		}
		res = r
		return true
	})
	return res
}

// atLeader runs fn at whichever node leads, asking again while a leadership change refused it
// or left its outcome unknown (a loaded machine changes leaders on its own): for steps whose
// repetition changes nothing the test checks. It fails the test on any other error.
func (c *testCluster) atLeader(what string, fn func(n *cluster.Node) error) {
	c.t.Helper()
	var last error
	testkit.Eventually(c.t, leaderTimeout, what, func() bool {
		n := c.currentLeader()
		if n == nil {
			return false
		}
		last = fn(n)
		if errors.Is(last, cluster.ErrNotLeader) || errors.Is(last, cluster.ErrUnknownOutcome) {
			return false
		}
		if last != nil {
			c.t.Fatalf("%s at %s: %v", what, n.ID(), last)
		}
		return true
	})
}

// acquireResult is what a blocked acquire running in a goroutine returns, and when.
type acquireResult struct {
	res fsm.Result
	err error
	at  time.Time
}

// acquireAsync starts a waiting acquire and returns where its outcome will arrive. It never
// touches t, so it may outlive the test body safely.
func acquireAsync(n *cluster.Node, session fsm.SessionID, lock string, wait time.Duration) <-chan acquireResult {
	ch := make(chan acquireResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait+opTimeout)
		defer cancel()
		res, err := n.Acquire(ctx, cluster.AcquireRequest{Session: session, Lock: lock, Wait: wait})
		ch <- acquireResult{res, err, time.Now()}
	}()
	return ch
}

// enqueue starts a waiting acquire for session and returns once the leader n's state machine
// shows it queued, so that the order of calls is the order of the queue.
func enqueue(t testing.TB, n *cluster.Node, session fsm.SessionID, lock string, wait time.Duration) <-chan acquireResult {
	t.Helper()
	before := n.FSM().Lock(lock).Waiters
	ch := acquireAsync(n, session, lock, wait)
	testkit.Eventually(t, opTimeout, "the waiter to be queued on "+lock, func() bool {
		select {
		case r := <-ch:
			t.Fatalf("acquire of %q returned before queueing: status %v, err %v", lock, r.res.Status, r.err)
		default:
		}
		return n.FSM().Lock(lock).Waiters > before
	})
	return ch
}

// receive waits for a blocked acquire's outcome.
func receive(t testing.TB, ch <-chan acquireResult, timeout time.Duration) acquireResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(timeout):
		t.Fatalf("no acquire outcome within %v", timeout)
		return acquireResult{}
	}
}

// notYet fails the test if a blocked acquire has returned.
func notYet(t testing.TB, ch <-chan acquireResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned early: status %v, token %d, err %v", what, r.res.Status, r.res.Token, r.err)
	default:
	}
}

// waitSessionGone waits until the node's state machine no longer has the session and returns
// when that was first seen.
func waitSessionGone(t testing.TB, n *cluster.Node, id fsm.SessionID, timeout time.Duration) time.Time {
	t.Helper()
	testkit.Eventually(t, timeout, "session "+id.String()+" to end", func() bool {
		_, ok := n.FSM().Session(id)
		return !ok
	})
	return time.Now()
}

// raftStat returns a numeric entry of the node's raft stats.
func raftStat(t testing.TB, n *cluster.Node, key string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(n.Raft().Stats()[key], 10, 64)
	if err != nil {
		t.Fatalf("raft stat %q of %s: %v", key, n.ID(), err)
	}
	return v
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "mem" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

// snapshotBytes returns the state machine's snapshot as it would be written to disk.
func snapshotBytes(t testing.TB, n *cluster.Node) []byte {
	t.Helper()
	s, err := n.FSM().Snapshot()
	if err != nil {
		t.Fatalf("snapshot of %s: %v", n.ID(), err)
	}
	defer s.Release()
	var sink memSink
	if err := s.Persist(&sink); err != nil {
		t.Fatalf("persist snapshot of %s: %v", n.ID(), err)
	}
	return sink.Bytes()
}

// isClassified reports whether err is one of the two outcomes a failed Node write may have.
func isClassified(err error) bool {
	return errors.Is(err, cluster.ErrNotLeader) || errors.Is(err, cluster.ErrUnknownOutcome)
}
