package embed_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/embed"
	"github.com/raftlock/raftlock/internal/testkit"
)

// Replicas that embed a node share locks through their own clients: a follower's client
// waits in the same FIFO queue as the leader's, its requests forwarded to the leader over the
// Raft port, and the tokens grow from one holder to the next.
func TestEmbeddedNodesShareLocksThroughTheirOwnClients(t *testing.T) {
	g := startGroup(t, 3, nil)
	ctx := testCtx(t)
	l, f := g.leader(), g.follower()
	name := "jobs/shared"
	holder := client.NewMutex(newSession(ctx, t, g.nodes[l].Client()), name)
	if err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waiter := client.NewMutex(newSession(ctx, t, g.nodes[f].Client()), name)
	got := make(chan error, 1)
	go func() { got <- waiter.Lock(ctx) }()
	testkit.Eventually(t, testTimeout, "the follower's client to queue", func() bool {
		lk, err := g.nodes[f].Client().GetLock(ctx, name)
		return err == nil && lk.Waiters == 1
	})
	first := holder.Token()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the follower's Lock: %v", err)
	}
	if waiter.Token() <= first {
		t.Fatalf("token %d after %d", waiter.Token(), first)
	}
	if err := waiter.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Close hands leadership over and stops the node: Done closes with ErrClosed, the node's own
// client is refused at once, and the others go on under another leader.
func TestCloseHandsLeadershipOverAndClosesDone(t *testing.T) {
	g := startGroup(t, 3, nil)
	ctx := testCtx(t)
	l := g.leader()
	n := g.nodes[l]
	c, err := n.NewClient(client.WithRetryTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	g.nodes[l] = nil
	select {
	case <-n.Done():
	default:
		t.Fatal("Done not closed when Close returned")
	}
	if !errors.Is(n.Err(), embed.ErrClosed) {
		t.Fatalf("Err after Close: %v", n.Err())
	}
	if _, err := c.NewSession(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("a closed node's client: %v, want ErrUnavailable", err)
	}
	other := g.leader()
	s := newSession(ctx, t, g.nodes[other].Client())
	if err := client.NewMutex(s, "after/close").Lock(ctx); err != nil {
		t.Fatalf("locking once the leader left: %v", err)
	}
	if err := n.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// A second node on a running node's data directory is refused with a clear error.
func TestStartingTwiceOnADataDirFails(t *testing.T) {
	g := startGroup(t, 1, nil)
	g.leader()
	cfg := g.cfgs[0]
	cfg.RaftListener = nil
	cfg.RaftAddr = "127.0.0.1:0"
	_, err := embed.Start(testCtx(t), cfg)
	if !errors.Is(err, cluster.ErrDataDirInUse) || !strings.Contains(err.Error(), cfg.DataDir) {
		t.Fatalf("second Start on %s: %v, want cluster.ErrDataDirInUse naming the directory", cfg.DataDir, err)
	}
}

// A node started with Join enters a running cluster through a member's Raft address, which the
// members' API shares.
func TestJoinThroughTheRaftPort(t *testing.T) {
	g := startGroup(t, 1, nil)
	ctx := testCtx(t)
	g.leader()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	joined, err := embed.Start(ctx, embed.Config{ID: "n2", DataDir: filepath.Join(t.TempDir(), "n2"),
		RaftListener: ln, Join: []string{g.nodes[0].RaftAddr()}, Logger: testLogger("n2")})
	if err != nil {
		t.Fatalf("joining: %v", err)
	}
	defer joined.Close(context.Background())
	if err := joined.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	s := newSession(ctx, t, joined.Client())
	if err := client.NewMutex(s, "joined/lock").Lock(ctx); err != nil {
		t.Fatalf("locking through the joined node: %v", err)
	}
	if ms, err := g.nodes[0].Cluster().Members(); err != nil || len(ms) != 2 {
		t.Fatalf("members %+v, %v: want two", ms, err)
	}
}

// With TLS and ACLs, members talk over mutual TLS on their Raft ports, and the in-process
// clients are held to their tokens like any other: none is refused, another policy's prefix
// is forbidden, and a token is honoured through a follower.
func TestEmbeddedNodesWithTLSAndACL(t *testing.T) {
	files := writeTLS(t, t.TempDir(), []string{"n1", "n2", "n3"})
	g := startGroup(t, 3, func(i int, c *embed.Config) { c.TLS, c.ACL = files[c.ID], true })
	ctx := testCtx(t)
	l, f := g.leader(), g.follower()
	anon := g.nodes[f].Client()
	if _, err := anon.NewSession(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("a session without a token: %v, want ErrUnauthorized", err)
	}
	boot, err := g.nodes[l].Client().Raw().ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := g.nodes[f].NewClient(client.WithToken(boot.SecretID))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Raw().CreatePolicy(ctx, api.Policy{Name: "jobs", Locks: []api.LockRule{{Prefix: "jobs/", Access: "write"}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.Raw().CreateToken(ctx, api.CreateTokenRequest{Policies: []string{"jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	worker, err := g.nodes[f].NewClient(client.WithToken(tok.SecretID))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	s := newSession(ctx, t, worker)
	if err := client.NewMutex(s, "jobs/a").Lock(ctx); err != nil {
		t.Fatalf("a lock the token may take, through a follower: %v", err)
	}
	if err := client.NewMutex(s, "db/a").TryLock(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("a lock outside the token's policy: %v, want ErrForbidden", err)
	}
}

// newSession returns a session of c, closed at the end of the test.
func newSession(ctx context.Context, t *testing.T, c *client.Client, opts ...client.SessionOption) *client.Session {
	t.Helper()
	s, err := c.NewSession(ctx, opts...)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// A node the cluster removes from its members stops, and says so: it would otherwise go on
// with a client that reaches nothing current.
func TestRemovedNodeStopsWithErrRemoved(t *testing.T) {
	g := startGroup(t, 3, nil)
	ctx := testCtx(t)
	l, f := g.leader(), g.follower()
	if err := g.nodes[l].Cluster().RemoveMember(ctx, g.nodes[f].ID()); err != nil {
		t.Fatalf("removing %s: %v", g.nodes[f].ID(), err)
	}
	select {
	case <-g.nodes[f].Done():
	case <-ctx.Done():
		t.Fatalf("a removed node still runs: Err %v", g.nodes[f].Err())
	}
	if !errors.Is(g.nodes[f].Err(), embed.ErrRemoved) {
		t.Fatalf("Err of a removed node: %v, want ErrRemoved", g.nodes[f].Err())
	}
	if err := g.nodes[l].Err(); err != nil {
		t.Fatalf("the leader stopped too: %v", err)
	}
}
