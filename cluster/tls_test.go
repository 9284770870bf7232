package cluster_test

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/testkit"
	"github.com/raftlock/raftlock/tlsutil"
)

// testPKI is a CA whose files live in a temporary directory.
type testPKI struct {
	t   testing.TB
	dir string
	ca  *tlsutil.CA
}

func newTestPKI(t testing.TB, name string) *testPKI {
	t.Helper()
	ca, err := tlsutil.NewCA(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca}
	key, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if err := tlsutil.WriteFiles(filepath.Join(p.dir, "ca.pem"), ca.CertPEM(), filepath.Join(p.dir, "ca-key.pem"), key, false); err != nil {
		t.Fatal(err)
	}
	return p
}

// store issues a node certificate for id and returns a Store over its files.
func (p *testPKI) store(id string) *tlsutil.Store {
	p.t.Helper()
	cert, key, err := p.ca.Issue(tlsutil.CertRequest{Name: id, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		p.t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(p.dir, id+".pem"), filepath.Join(p.dir, id+"-key.pem")
	if err := tlsutil.WriteFiles(certFile, cert, keyFile, key, true); err != nil {
		p.t.Fatal(err)
	}
	s, err := tlsutil.New(tlsutil.Files{CertFile: certFile, KeyFile: keyFile, CAFile: filepath.Join(p.dir, "ca.pem")}, 0, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// raftTLS returns a node's Raft TLS configurations from s.
func raftTLS(s *tlsutil.Store) cluster.TLS {
	return cluster.TLS{RaftServer: s.PeerServerConfig(), RaftClient: s.PeerClientConfig()}
}

// newTLSCluster starts a three-node cluster whose Raft traffic is mutual TLS under p.
func newTLSCluster(t *testing.T, p *testPKI) *testCluster {
	stores := map[string]*tlsutil.Store{}
	for _, id := range []string{"n1", "n2", "n3"} {
		stores[id] = p.store(id)
	}
	return newTestCluster(t, 3, func(c *cluster.Config) { c.TLS = raftTLS(stores[c.ID]) })
}

func TestRaftOverMutualTLSReplicates(t *testing.T) {
	c := newTLSCluster(t, newTestPKI(t, "cluster"))
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	s := createSession(t, leader, "tls", longTTL, 0)
	if tok := mustAcquire(t, leader, s, "jobs/tls", "v"); tok == 0 {
		t.Fatal("no fencing token")
	}
	c.waitConverged()
	for _, i := range c.running() {
		if n := c.node(i); n.Counters().RaftTLSRefused != 0 {
			t.Errorf("%s refused %d Raft connections of its own cluster", n.ID(), n.Counters().RaftTLSRefused)
		}
	}
}

// TestRaftRefusesPeersWithoutANodeCertificateOfTheCA starts, beside a TLS cluster, nodes that
// believe they belong to it (its members are in their initial configuration, so they campaign
// and dial every member) but hold a certificate of another CA, no certificate, or no TLS at
// all. Every member must refuse each of them in the handshake, and the cluster must keep its
// leader, term and membership.
func TestRaftRefusesPeersWithoutANodeCertificateOfTheCA(t *testing.T) {
	p := newTestPKI(t, "cluster")
	c := newTLSCluster(t, p)
	li, leader := c.waitLeader()
	term := leader.Raft().CurrentTerm()
	other := newTestPKI(t, "other")

	rogues := []struct {
		name string
		tls  func() cluster.TLS
	}{
		{"a node certificate of another CA", func() cluster.TLS { return raftTLS(other.store("rogue")) }},
		{"no certificate", func() cluster.TLS {
			return cluster.TLS{RaftServer: other.store("rogue").PeerServerConfig(), RaftClient: &tls.Config{InsecureSkipVerify: true}}
		}},
		{"a client certificate of the CA", func() cluster.TLS {
			certPEM, keyPEM, err := p.ca.Issue(tlsutil.CertRequest{Name: "app", Client: true})
			if err != nil {
				t.Fatal(err)
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			return cluster.TLS{RaftServer: other.store("rogue").PeerServerConfig(),
				RaftClient: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}}
		}},
		{"no TLS", func() cluster.TLS { return cluster.TLS{} }},
	}
	for _, r := range rogues {
		t.Run(r.name, func(t *testing.T) {
			before := make([]uint64, len(c.ids))
			for _, i := range c.running() {
				before[i] = c.node(i).Counters().RaftTLSRefused
			}
			rogue := startRogue(t, c, r.tls())
			// Each campaign of the rogue dials every member; two refusals at each is two tries.
			testkit.Eventually(t, leaderTimeout, "every member to refuse the rogue twice", func() bool {
				for _, i := range c.running() {
					if c.node(i).Counters().RaftTLSRefused < before[i]+2 {
						return false
					}
				}
				return true
			})
			if id, _ := rogue.Leader(); id != "" {
				t.Errorf("the rogue learnt of a leader %q", id)
			}
			if got := rogue.Raft().LastIndex(); got != 1 {
				t.Errorf("the rogue's log reached index %d; only its bootstrap entry is its own", got)
			}
			if err := rogue.Close(); err != nil {
				t.Logf("closing the rogue: %v", err)
			}
			if leader.Raft().State() != raft.Leader || !leader.IsLeader() || leader.Raft().CurrentTerm() != term {
				t.Fatalf("the cluster changed: %s leads=%v, term %d -> %d", c.ids[li], leader.IsLeader(), term, leader.Raft().CurrentTerm())
			}
			cfg := leader.Raft().GetConfiguration()
			if err := cfg.Error(); err != nil {
				t.Fatal(err)
			}
			if servers := cfg.Configuration().Servers; len(servers) != 3 {
				t.Fatalf("the cluster's configuration has %d servers: %v", len(servers), servers)
			}
		})
	}
	// The cluster still commits.
	s := createSession(t, leader, "after", longTTL, 0)
	mustAcquire(t, leader, s, "still/works", "v")
}

// startRogue starts a node that lists c's members and itself as its initial cluster.
func startRogue(t *testing.T, c *testCluster, tlsCfg cluster.TLS) *cluster.Node {
	t.Helper()
	initial := map[string]string{"rogue": "127.0.0.1:0"}
	for i, id := range c.ids {
		initial[id] = c.addrs[i]
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.New(cluster.Config{
		ID:                 "rogue",
		DataDir:            filepath.Join(t.TempDir(), "rogue"),
		RaftListener:       ln,
		AdvertiseHTTP:      "127.0.0.1:1",
		InitialCluster:     initial,
		HeartbeatTimeout:   testHeartbeat,
		ElectionTimeout:    testElection,
		LeaderLeaseTimeout: testLease,
		TLS:                tlsCfg,
		Logger:             testLogger("rogue"),
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}
