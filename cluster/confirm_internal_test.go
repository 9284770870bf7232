package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A leadership confirmation asked of a closed node fails at once with ErrShutdown. Raft can take
// a VerifyLeader request into a buffer it never reads again once it has shut down (it picks at
// random between its shutdown channel and that buffer), so the confirmer must not wait on raft's
// answer alone: it would wait out every caller's deadline, and never confirm again.
func TestConfirmOnAClosedNodeFailsAtOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Config{
		ID: "n1", DataDir: t.TempDir(), RaftListener: ln, AdvertiseHTTP: "127.0.0.1:1",
		InitialCluster:   map[string]string{"n1": ln.Addr().String()},
		HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
		LeaderLeaseTimeout: 100 * time.Millisecond, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := n.WaitLeader(wctx); err != nil {
		t.Fatal(err)
	}
	if err := n.verify.confirm(wctx); err != nil {
		t.Fatalf("confirm on the live leader: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 16 { // each call has even odds of being buffered and dropped by raft
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.verify.confirm(ctx)
		cancel()
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("call %d: confirm on a closed node = %v, want ErrShutdown", i, err)
		}
	}
}
