package cluster

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/internal/testkit"
)

// A leadership confirmation asked of a closed node fails at once with ErrShutdown. Raft can take
// a VerifyLeader request into a buffer it never reads again once it has shut down (it picks at
// random between its shutdown channel and that buffer), so the confirmer must not wait on raft's
// answer alone: it would wait out every caller's deadline, and never confirm again.
func TestConfirmOnAClosedNodeFailsAtOnce(t *testing.T) {
	n := newSingleNode(t)
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	term := n.raft.CurrentTerm()
	if err := n.verify.confirm(wctx, time.Now(), term); err != nil {
		t.Fatalf("confirm on the live leader: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 16 { // each call has even odds of being buffered and dropped by raft
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := n.verify.confirm(ctx, time.Now(), term)
		cancel()
		if !errors.Is(err, ErrShutdown) {
			t.Fatalf("call %d: confirm on a closed node = %v, want ErrShutdown", i, err)
		}
	}
}

// newSingleNode starts a one-node cluster and waits until it leads; it is closed with the test.
func newSingleNode(t *testing.T) *Node {
	t.Helper()
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
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := n.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	// Just after it wins, the leader records its own address and enables its features: wait
	// for both, so that a test counting the log's entries counts only its own.
	testkit.Eventually(t, 10*time.Second, "the leader's address and features in the log", func() bool {
		_, published := n.fsm.Member(n.cfg.ID)
		return published && n.fsm.FeatureCount() > 0
	})
	return n
}

// Only voters count towards a confirmation, only in the leader's term, and only for messages
// sent at or after the moment asked about; the leader counts itself when it is a voter.
func TestQuorumSinceCountsVotersOfTheTermAfterTheMoment(t *testing.T) {
	at := time.Now()
	before, after := at.Add(-time.Millisecond), at.Add(time.Millisecond)
	voter := func(id string) raft.Server { return raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter} }
	five := raft.Configuration{Servers: []raft.Server{voter("n1"), voter("n2"), voter("n3"), voter("n4"), voter("n5"),
		{ID: "l1", Suffrage: raft.Nonvoter}, {ID: "l2", Suffrage: raft.Nonvoter}}}
	cases := []struct {
		name string
		acks map[raft.ServerID]peerAck
		want bool
	}{
		{"two voters after", map[raft.ServerID]peerAck{"n2": {7, after}, "n3": {7, at}}, true},
		{"one voter after", map[raft.ServerID]peerAck{"n2": {7, after}, "n3": {7, before}}, false},
		{"non-voters do not count", map[raft.ServerID]peerAck{"n2": {7, after}, "l1": {7, after}, "l2": {7, after}}, false},
		{"an older term does not count", map[raft.ServerID]peerAck{"n2": {7, after}, "n3": {6, after}}, false},
	}
	for _, tc := range cases {
		tr := &ackTransport{acks: tc.acks}
		if got := tr.quorumSince(five, "n1", raft.Server{}, 7, at); got != tc.want {
			t.Errorf("%s: quorumSince = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A leader that is not a voter (being removed) does not count itself.
	tr := &ackTransport{acks: map[raft.ServerID]peerAck{"n2": {7, after}, "n3": {7, after}}}
	if tr.quorumSince(five, "l1", raft.Server{}, 7, at) {
		t.Error("a non-voting leader counted itself")
	}
}

// The asking member counts towards a confirmation only as the voter its id and address name
// together: with three voters the leader and the asker are a majority; with five they need a
// third voter's acknowledgment after the moment asked about.
func TestQuorumSinceCountsTheAskerAsTheVoterItNames(t *testing.T) {
	at := time.Now()
	after := at.Add(time.Millisecond)
	voter := func(id string) raft.Server {
		return raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":7100"), Suffrage: raft.Voter}
	}
	three := raft.Configuration{Servers: []raft.Server{voter("n1"), voter("n2"), voter("n3"),
		{ID: "l1", Address: "l1:7100", Suffrage: raft.Nonvoter}}}
	five := raft.Configuration{Servers: append(append([]raft.Server(nil), three.Servers...), voter("n4"), voter("n5"))}
	none := map[raft.ServerID]peerAck{}
	cases := []struct {
		name  string
		cfg   raft.Configuration
		asker raft.Server
		acks  map[raft.ServerID]peerAck
		want  bool
	}{
		{"three voters: the leader and the asker", three, voter("n2"), none, true},
		{"three voters: nobody asked", three, raft.Server{}, none, false},
		{"the asker's address is not the voter's", three, raft.Server{ID: "n2", Address: "elsewhere:7100"}, none, false},
		{"a non-voter asked", three, raft.Server{ID: "l1", Address: "l1:7100"}, none, false},
		{"an asker the configuration lacks", three, voter("n9"), none, false},
		{"the leader naming itself counts once", three, voter("n1"), none, false},
		{"five voters: the leader and the asker alone", five, voter("n2"), none, false},
		{"five voters: and one acknowledgment after", five, voter("n2"), map[raft.ServerID]peerAck{"n4": {7, after}}, true},
		{"five voters: the asker's own acknowledgment is not a second vote", five, voter("n2"), map[raft.ServerID]peerAck{"n2": {7, after}}, false},
	}
	for _, tc := range cases {
		tr := &ackTransport{acks: tc.acks}
		if got := tr.quorumSince(tc.cfg, "n1", tc.asker, 7, at); got != tc.want {
			t.Errorf("%s: quorumSince = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A question's payload names its asker, term, id and address, and anything else names nobody.
func TestAskerPayloadRoundTripsAndMalformedNamesNobody(t *testing.T) {
	s, term := parseAsker(askerPayload(42, "n2", "10.0.0.2:7100"))
	if term != 42 || s.ID != "n2" || s.Address != "10.0.0.2:7100" {
		t.Fatalf("parsed %+v in term %d", s, term)
	}
	full := askerPayload(42, "n2", "")
	for _, p := range [][]byte{nil, {}, full[:7], full[:8], append(full[:8:8], 0), append(full[:8:8], 9, 'n')} {
		if s, _ := parseAsker(p); s.ID != "" {
			t.Errorf("payload %x named %+v", p, s)
		}
	}
}
