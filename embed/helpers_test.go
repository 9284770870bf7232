package embed_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/embed"
	"github.com/raftlock/raftlock/tlsutil"
)

// testTimeout bounds a test's waits: generous, the machine is shared and slow.
const testTimeout = 30 * time.Second

// group is a cluster of embedded nodes in this test process, as the replicas of a service
// would run them, one per process.
type group struct {
	t     testing.TB
	cfgs  []embed.Config
	nodes []*embed.Node
}

// startGroup starts size nodes that bootstrap one cluster; tune adjusts each node's config.
func startGroup(t testing.TB, size int, tune func(i int, c *embed.Config)) *group {
	t.Helper()
	g := &group{t: t, nodes: make([]*embed.Node, size)}
	peers := map[string]string{}
	lns := make([]net.Listener, size)
	dir := t.TempDir()
	for i := range size {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		peers[nodeID(i)] = ln.Addr().String()
	}
	for i := range size {
		c := embed.Config{ID: nodeID(i), DataDir: filepath.Join(dir, nodeID(i)), RaftListener: lns[i],
			Peers: peers, Logger: testLogger(nodeID(i))}
		if tune != nil {
			tune(i, &c)
		}
		g.cfgs = append(g.cfgs, c)
	}
	t.Cleanup(g.closeAll)
	for i := range size {
		g.start(i)
	}
	return g
}

func nodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

// testLogger discards logs unless RAFTLOCK_TEST_LOG names a level (e.g. "debug").
func testLogger(name string) hclog.Logger {
	level := os.Getenv("RAFTLOCK_TEST_LOG")
	if level == "" {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(level), Output: os.Stderr})
}

// start starts node i from its config; a restart binds its old Raft address again.
func (g *group) start(i int) {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n, err := embed.Start(ctx, g.cfgs[i])
	if err != nil {
		g.t.Fatalf("starting %s: %v", g.cfgs[i].ID, err)
	}
	g.nodes[i] = n
}

// leader waits until the running nodes agree on a Raft leader, and returns its index.
func (g *group) leader() int {
	g.t.Helper()
	deadline := time.Now().Add(testTimeout)
	for time.Now().Before(deadline) {
		for i, n := range g.nodes {
			if n != nil && n.Err() == nil && n.Cluster().IsLeader() {
				if g.allKnow(n.ID()) {
					return i
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.t.Fatal("no leader that every running node knows")
	return -1
}

// allKnow says whether every running node knows id as the leader.
func (g *group) allKnow(id string) bool {
	for _, n := range g.nodes {
		if n == nil || n.Err() != nil {
			continue
		}
		if lid, addr := n.Cluster().Leader(); lid != id || addr == "" {
			return false
		}
	}
	return true
}

// follower returns the index of a running node that does not lead.
func (g *group) follower() int {
	g.t.Helper()
	l := g.leader()
	for i, n := range g.nodes {
		if i != l && n != nil && n.Err() == nil {
			return i
		}
	}
	g.t.Fatal("no running follower")
	return -1
}

func (g *group) closeAll() {
	for i, n := range g.nodes {
		if n != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = n.Close(ctx)
			cancel()
			g.nodes[i] = nil
		}
	}
}

// writeTLS writes a CA and a node certificate for each of ids into dir, and returns each
// node's files.
func writeTLS(t *testing.T, dir string, ids []string) map[string]embed.TLSFiles {
	t.Helper()
	ca, err := tlsutil.NewCA("test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	out := map[string]embed.TLSFiles{}
	for _, id := range ids {
		cert, key, err := ca.Issue(tlsutil.CertRequest{Name: id, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
		if err != nil {
			t.Fatal(err)
		}
		f := embed.TLSFiles{CertFile: filepath.Join(dir, id+".pem"), KeyFile: filepath.Join(dir, id+"-key.pem"), CAFile: caFile}
		if err := tlsutil.WriteFiles(f.CertFile, cert, f.KeyFile, key, true); err != nil {
			t.Fatal(err)
		}
		out[id] = f
	}
	return out
}

// testCtx returns a context that ends with the test, or after testTimeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// freeAddr returns a loopback address with a port the system just handed out.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
