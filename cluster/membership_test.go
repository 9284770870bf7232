package cluster_test

import (
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A second node on a data directory in use is refused with a clear error, and so is a
// recovery; once the node is closed, the directory is free again.
func TestDataDirInUseIsRefused(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.waitLeader()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.config(0, ln)
	_, err = cluster.New(cfg)
	if !errors.Is(err, cluster.ErrDataDirInUse) {
		ln.Close()
		t.Fatalf("second node on %s: %v, want ErrDataDirInUse", c.dirs[0], err)
	}
	ln.Close()
	if _, err := cluster.Recover(c.dirs[0], map[string]string{"n1": c.addrs[0]}, 0, nil); !errors.Is(err, cluster.ErrDataDirInUse) {
		t.Fatalf("recover of a running node's dir: %v, want ErrDataDirInUse", err)
	}
	c.stop(0)
	c.restart(0)
	c.waitLeader()
}

// A non-voter that cannot catch up (here: nothing runs at its addresses) is not promoted, and
// so never counts towards the quorum: the cluster loses a voter and still commits. Added as a
// voter, the same node would have made a majority of the four voters three, and the cluster
// would have stopped.
func TestUnreachableNonvoterIsNotPromotedAndCostsNoQuorum(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	dead := httptest.NewServer(nil)
	deadHTTP := dead.Listener.Addr().String()
	dead.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadRaft := ln.Addr().String()
	ln.Close()
	if err := leader.AddNonvoter(opContext(t), "n9", deadRaft, deadHTTP); err != nil {
		t.Fatal(err)
	}
	if err := leader.PromoteMember(opContext(t), "n9"); !errors.Is(err, cluster.ErrNotCaughtUp) {
		t.Fatalf("promote of a node that does not run: %v, want ErrNotCaughtUp", err)
	}
	if w := leader.VoterWarning(); w != "" {
		t.Fatalf("warning with 3 voters and a non-voter: %q", w)
	}
	li, _ := c.waitLeader()
	c.kill(c.followers(li)[0])
	_, leader = c.waitLeader()
	createSession(t, leader, "after", longTTL, 0) // commits with two of the three voters
	ms, err := leader.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == "n9" && m.Voter {
			t.Fatal("n9 became a voter")
		}
	}
}

// A live non-voter that has caught up is promoted; the fourth voter brings a warning.
func TestCaughtUpNonvoterIsPromoted(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	spare := startSpare(t, c, "n4")
	if err := leader.AddNonvoter(opContext(t), "n4", spare.raftAddr, spare.httpAddr); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, leaderTimeout, "n4 to be promoted", func() bool {
		_, leader = c.waitLeader()
		return leader.PromoteMember(opContext(t), "n4") == nil
	})
	if w := leader.VoterWarning(); w == "" {
		t.Fatal("no warning with four voters")
	}
	ms, err := leader.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == "n4" && !m.Voter {
			t.Fatal("n4 is still a non-voter")
		}
	}
}

// spareNode is a node started outside a testCluster, to be added to it.
type spareNode struct {
	node               *cluster.Node
	raftAddr, httpAddr string
}

// startSpare starts node id with a fresh data directory and no configuration, serving what
// the leader asks of members (health, readiness) on its own HTTP address.
func startSpare(t *testing.T, c *testCluster, id string) *spareNode {
	t.Helper()
	return startSpareOn(t, c, id, nil)
}

// startSpareOn is startSpare with the node's Raft listener wrapped by wrap, if not nil.
func startSpareOn(t *testing.T, c *testCluster, id string, wrap func(net.Listener) net.Listener) *spareNode {
	t.Helper()
	sp := &spareNode{}
	srv := httptest.NewUnstartedServer(nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	i := len(c.ids)
	c.mu.Lock()
	c.ids = append(c.ids, id)
	c.addrs = append(c.addrs, ln.Addr().String())
	c.dirs = append(c.dirs, filepath.Join(t.TempDir(), id))
	c.https = append(c.https, srv)
	c.nodes = append(c.nodes, nil)
	c.mu.Unlock()
	srv.Config.Handler = c.memberHandler(i)
	srv.Start()
	t.Cleanup(srv.Close)
	cfg := c.config(i, ln)
	cfg.InitialCluster = nil
	n, err := cluster.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
	sp.node, sp.raftAddr, sp.httpAddr = n, ln.Addr().String(), srv.Listener.Addr().String()
	return sp
}

// A node removed while it runs learns it from its own configuration: it counts as removed
// and is not ready.
func TestNodeRemovedWhileRunningKnowsIt(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li, leader := c.waitLeader()
	c.waitPublished(leader)
	victim := c.followers(li)[0]
	n := c.node(victim)
	if err := leader.RemoveMember(opContext(t), c.ids[victim]); err != nil {
		t.Fatal(err)
	}
	select {
	case <-n.Removed():
	case <-time.After(leaderTimeout):
		t.Fatal("the removed node did not notice")
	}
	if !n.IsRemoved() || n.Ready(opContext(t)) {
		t.Fatalf("removed node: IsRemoved %t, ready %t", n.IsRemoved(), n.Ready(opContext(t)))
	}
	if l := c.node(li); l.IsRemoved() {
		t.Fatal("the leader counts as removed")
	}
}

// A node removed while it was stopped comes back with its old data directory, in which it is
// still a voter: the cluster takes no notice. Its (pre-)votes are refused, so the term does
// not grow, the leader stays, and it is not added back; hearing no leader, it asks the others
// for the leader's configuration and learns it was removed.
func TestRemovedNodeBackWithItsOldDataDoesNotDisturb(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	li, leader := c.waitLeader()
	c.waitPublished(leader)
	victim := c.followers(li)[0]
	c.stop(victim)
	if err := leader.RemoveMember(opContext(t), c.ids[victim]); err != nil {
		t.Fatal(err)
	}
	term := leader.Raft().CurrentTerm()
	// On a new Raft address, so that nothing the leader sent the old one reaches it: it can
	// learn of its removal only by asking.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.start(victim, ln)
	back := c.node(victim)
	// Ten election timeouts: the returned node times out and campaigns several times.
	deadline := time.Now().Add(10 * testElection)
	for time.Now().Before(deadline) {
		if l := c.currentLeader(); l != nil && (l.ID() != leader.ID() || l.Raft().CurrentTerm() != term) {
			t.Fatalf("leader %s term %d, was %s term %d", l.ID(), l.Raft().CurrentTerm(), leader.ID(), term)
		}
		time.Sleep(20 * time.Millisecond) // sampling, not synchronisation
	}
	if got := leader.Raft().CurrentTerm(); got != term {
		t.Fatalf("term %d, was %d", got, term)
	}
	ms, err := leader.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == c.ids[victim] {
			t.Fatalf("%s is a member again", m.ID)
		}
	}
	if back.Ready(opContext(t)) {
		t.Fatal("the removed node says it is ready")
	}
	createSession(t, leader, "still", longTTL, 0)
	// Hearing no leader, it asks the others, and learns it was removed.
	select {
	case <-back.Removed():
	case <-time.After(leaderTimeout):
		t.Fatal("the node back with old data did not learn it was removed")
	}
}

// A node added, promoted and removed faster than it looks at its configuration still learns
// that it was removed: not being named by its configuration is what counts, not having been
// seen in it first.
func TestNodeRemovedRightAfterItWasAddedKnowsIt(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	spare := startSpare(t, c, "n4")
	if err := leader.AddNonvoter(opContext(t), "n4", spare.raftAddr, spare.httpAddr); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, leaderTimeout, "n4 to be promoted", func() bool {
		return leader.PromoteMember(opContext(t), "n4") == nil
	})
	if err := leader.RemoveMember(opContext(t), "n4"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-spare.node.Removed():
	case <-time.After(leaderTimeout):
		t.Fatal("the node removed right after it was added did not notice")
	}
}

// A node added to a cluster whose leader compacted its log installs a snapshot taken before
// its addition: until the entry that added it arrives, its own configuration names the others
// and not itself. However long that entry takes (a large state on a loaded machine took
// seconds), the node is not removed while the leader's configuration names it.
func TestNodeCatchingUpFromASnapshotBeforeItsAdditionIsNotRemoved(t *testing.T) {
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		cfg.WALSegmentSize = 4096 // wal compacts whole segments: keep them small
		cfg.TrailingLogs = 1
		cfg.RemovalGrace = time.Millisecond
	})
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	keep := createSession(t, leader, "keeper", longTTL, 0)
	for i := range 40 {
		mustAcquire(t, leader, keep, fmt.Sprintf("filler/%d", i), strings.Repeat("x", 200))
	}
	if err := leader.Raft().Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	snapshotAt := raftStat(t, leader, "last_snapshot_index")
	// Every message reaches the new node a second late: the entry adding it comes at least a
	// second after the snapshot, several looks of its removal check.
	spare := startSpareOn(t, c, "n4", func(ln net.Listener) net.Listener { return slowListener{ln, time.Second} })
	if err := leader.AddNonvoter(opContext(t), "n4", spare.raftAddr, spare.httpAddr); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 3*leaderTimeout, "n4 to install the snapshot and get the entry adding it", func() bool {
		if raftStat(t, spare.node, "last_snapshot_index") < snapshotAt {
			return false
		}
		for _, s := range spare.node.Raft().GetConfiguration().Configuration().Servers {
			if s.ID == "n4" {
				return true
			}
		}
		return false
	})
	select {
	case <-spare.node.Removed():
		t.Fatal("n4 counted itself removed while it caught up from a snapshot taken before its addition")
	default:
	}
	if spare.node.IsRemoved() {
		t.Fatal("n4 counts as removed")
	}
}

// slowListener delays every read of its connections.
type slowListener struct {
	net.Listener
	delay time.Duration
}

func (l slowListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &slowConn{Conn: conn, delay: l.delay, closed: make(chan struct{})}, nil
}

// slowConn delays each read by delay, or until it is closed.
type slowConn struct {
	net.Conn
	delay  time.Duration
	once   sync.Once
	closed chan struct{}
}

func (c *slowConn) Read(p []byte) (int, error) {
	t := time.NewTimer(c.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.closed:
	}
	return c.Conn.Read(p)
}

func (c *slowConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}
