//go:build unix

package main

import (
	"context"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// The rule of docs/operations.md ("Removing and replacing a node"): a removed node comes back
// with --join, with its old data directory or an empty one alike. Re-added, it is a new
// non-voter whose log the leader overwrites where it differs and brings up to date, and that
// is promoted once caught up; its old votes are of terms the cluster has left behind. (Only a
// node that lost its data while still a member is refused: "Replacing a node whose data was
// lost".) Here n3 is removed while it runs (it stops), locks change meanwhile, and it comes
// back with its old data: it is a voter again and serves the cluster's state, not its own.
func TestARemovedNodeRejoinsWithItsOldDataDir(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	c := newProcCluster(t, ids...)
	for _, id := range ids {
		c.start(id, "--initial-cluster", c.initial(ids...))
	}
	c.waitCluster("n1", ids...)
	cl := c.client("n1", "n2")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := cl.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: "10m"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := cl.Raw().Acquire(ctx, "rejoin/before", api.AcquireRequest{Session: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	c.mustCLI([]string{"n1", "n2"}, "members", "remove", "n3")
	if code := c.exited("n3", 30*time.Second); code != 0 {
		t.Fatalf("n3 after its removal: exit status %d, want 0 (stopped)", code)
	}
	// What n3 never saw: a release and a new grant.
	if err := cl.Raw().Release(ctx, "rejoin/before", s.ID, before.Token); err != nil {
		t.Fatal(err)
	}
	after, err := cl.Raw().Acquire(ctx, "rejoin/after", api.AcquireRequest{Session: s.ID})
	if err != nil {
		t.Fatal(err)
	}
	c.start("n3", "--join", c.endpoints("n1")[0]+","+c.endpoints("n2")[0])
	c.waitCluster("n1", ids...)
	n3 := c.client("n3")
	testkit.Eventually(t, 60*time.Second, "n3 to serve the cluster's state", func() bool {
		l, err := n3.GetLock(ctx, "rejoin/after", client.Stale(), client.AtEndpoint(c.endpoints("n3")[0]))
		if err != nil || !l.Held || l.Token != after.Token {
			return false
		}
		b, err := n3.GetLock(ctx, "rejoin/before", client.Stale(), client.AtEndpoint(c.endpoints("n3")[0]))
		return err == nil && !b.Held
	})
	if code := c.exited("n3", 0); code >= 0 {
		t.Fatalf("n3 exited (%d) after it rejoined:\n%s", code, c.nodes["n3"].log)
	}
	c.checkLogs()
}
