package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// newThreeNodes starts a three-node cluster in this process and returns its nodes once one of
// them leads and is ready; they are closed with the test.
func newThreeNodes(t *testing.T) []*Node {
	t.Helper()
	var lns []net.Listener
	initial := map[string]string{}
	for i := range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		initial[fmt.Sprintf("n%d", i+1)] = ln.Addr().String()
	}
	var nodes []*Node
	for i, ln := range lns {
		n, err := New(Config{
			ID: fmt.Sprintf("n%d", i+1), DataDir: t.TempDir(), RaftListener: ln, AdvertiseHTTP: "127.0.0.1:1",
			InitialCluster:   initial,
			HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
			LeaderLeaseTimeout: 400 * time.Millisecond, Logger: hclog.NewNullLogger(),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		nodes = append(nodes, n)
	}
	readyLeader(t, nodes)
	return nodes
}

// readyLeader waits until one of the nodes is the ready leader, and returns it.
func readyLeader(t *testing.T, nodes []*Node) *Node {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.IsLeader() {
				return n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no ready leader")
	return nil
}

// transfer hands leadership from the ready leader from to the node to, and waits until to is
// the ready leader.
func transfer(t *testing.T, from, to *Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := from.TransferLeadership(ctx, to.ID()); err != nil {
		t.Fatalf("transfer %s → %s: %v", from.ID(), to.ID(), err)
	}
	if got := readyLeader(t, []*Node{to}); got != to {
		t.Fatalf("%s did not become the ready leader", to.ID())
	}
}

// A renewal and a linearizable read admitted while a node led one term, and stalled until the
// node was deposed and elected again, must not be acknowledged on the strength of the new term:
// the renewal was decided against the old term's timers (a leader in between may have
// expired the session), and the read would rest on a state that the new term's Barrier may
// not have brought up to date. Both fail; the client asks again.
func TestRequestAdmittedInAnEarlierTermIsNotConfirmedInALaterOne(t *testing.T) {
	nodes := newThreeNodes(t)
	a := readyLeader(t, nodes)
	var b *Node
	for _, n := range nodes {
		if n != a {
			b = n
			break
		}
	}
	s := session(t, a)
	admitted, release := make(chan uint64, 2), make(chan struct{})
	a.admitted = func(term uint64) {
		admitted <- term
		<-release
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	renewed, read := make(chan error, 1), make(chan error, 1)
	go func() { _, err := a.Renew(ctx, s); renewed <- err }()
	go func() { read <- a.ReadBarrier(ctx) }()
	before := <-admitted
	<-admitted
	// a is deposed, then elected again, in a later term; the stalled requests then go on.
	transfer(t, a, b)
	transfer(t, b, a)
	if after := a.raft.CurrentTerm(); after <= before {
		t.Fatalf("term %d after the transfers, admitted in %d", after, before)
	}
	a.admitted = nil
	close(release)
	for what, ch := range map[string]chan error{"renewal": renewed, "read": read} {
		if err := <-ch; !errors.Is(err, ErrNotLeader) {
			t.Fatalf("%s admitted in term %d and confirmed after a re-election: %v, want ErrNotLeader", what, before, err)
		}
	}
	// Admitted in the new term, they succeed.
	if _, err := a.Renew(ctx, s); err != nil {
		t.Fatalf("renewal in the new term: %v", err)
	}
	if err := a.ReadBarrier(ctx); err != nil {
		t.Fatalf("read in the new term: %v", err)
	}
}
