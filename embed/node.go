package embed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/internal/version"
	"github.com/raftlock/raftlock/tlsutil"
)

// ErrClosed is what Node.Err returns after Close.
var ErrClosed = errors.New("embed: node closed")

// ErrRemoved is what Node.Err returns once the cluster removed this node from its members: it
// no longer receives the log, so it stops; its data directory is of no further use (a replica
// that should come back starts on an empty one, with Join).
var ErrRemoved = errors.New("embed: node stopped: removed from the cluster")

// Node is a raftlock node running in this process, with a client bound to it.
type Node struct {
	cfg      Config
	node     *cluster.Node
	api      *httpapi.Server
	client   *client.Client
	endpoint string // the in-process client's endpoint: a name, never dialled
	adv      string // the Raft address the other members reach this node at
	httpAddr string // the bound address of Config.HTTPAddr's API; "" without it

	failed   chan error    // the first fatal error, from a callback or a server
	closing  chan struct{} // closed when the node begins to stop
	done     chan struct{} // closed when it has stopped
	err      error         // why it stopped; written before done closes
	stopOnce sync.Once
	wg       sync.WaitGroup // the servers' goroutines and the monitor
}

// Start starts a node from cfg: it opens (and locks) the data directory, listens on the Raft
// address, bootstraps a new cluster from Peers or joins one through Join, and serves the API
// to the other members on the Raft port (and on HTTPAddr if set). With Join it returns once
// the node was added, or ctx ends; with Peers it returns at once, and the node's client waits
// (within its retry timeout) for the cluster to elect a leader, as WaitLeader does.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	store, err := loadTLS(cfg)
	if err != nil {
		return nil, err
	}
	ln := cfg.RaftListener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			return nil, fmt.Errorf("embed: raft listen: %w", err)
		}
	}
	n := &Node{cfg: cfg, endpoint: "http://" + cfg.ID + ".in-process", failed: make(chan error, 1),
		closing: make(chan struct{}), done: make(chan struct{})}
	if n.adv, err = cfg.advertised(ln); err != nil {
		ln.Close()
		return nil, err
	}
	if n.node, err = cluster.New(n.clusterConfig(ln, store)); err != nil {
		ln.Close()
		return nil, fmt.Errorf("embed: %w", err)
	}
	n.api = httpapi.New(n.node, n.apiConfig(store))
	if cfg.Metrics != nil {
		if err := n.api.RegisterMetrics(cfg.Metrics); err != nil {
			n.cfg.Metrics = nil // nothing of this node's to unregister
			n.halt(err)
			n.wg.Wait()
			return nil, fmt.Errorf("embed: %w", err)
		}
	}
	if n.client, err = n.NewClient(client.WithToken(cfg.Token)); err != nil {
		n.halt(err)
		return nil, fmt.Errorf("embed: %w", err)
	}
	n.serve("the members' API on the Raft port", func() error { return n.api.ServePeers(n.node.APIListener()) })
	if cfg.HTTPAddr != "" {
		hl, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			n.halt(err)
			n.wg.Wait()
			return nil, fmt.Errorf("embed: http listen: %w", err)
		}
		n.httpAddr = hl.Addr().String()
		n.serve("the HTTP API on "+n.httpAddr, func() error { return n.api.Serve(hl) })
	}
	n.wg.Add(1)
	go n.monitor()
	cfg.Logger.Info("embedded node started", "id", cfg.ID, "raft", n.adv, "tls", store != nil, "data_dir", cfg.DataDir)
	if len(cfg.Join) > 0 {
		if err := n.node.Join(ctx, cfg.Join); err != nil {
			n.halt(err)
			n.wg.Wait()
			return nil, fmt.Errorf("embed: %w", err)
		}
		cfg.Logger.Info("joined the cluster", "via", cfg.Join)
	}
	return n, nil
}

func (n *Node) clusterConfig(ln net.Listener, store *tlsutil.Store) cluster.Config {
	c := n.cfg
	cc := cluster.Config{
		ID:               c.ID,
		DataDir:          c.DataDir,
		LogStore:         c.LogStore,
		RaftListener:     ln,
		AdvertiseRaft:    n.adv,
		AdvertiseHTTP:    n.adv, // the API shares the Raft port
		APIOnRaftPort:    true,
		InitialCluster:   c.Peers,
		Token:            c.Token,
		Logger:           c.Logger,
		Version:          version.Version,
		OnStorageFailure: n.storageFailed,
	}
	if c.ElectionTimeout > 0 {
		cc.HeartbeatTimeout, cc.ElectionTimeout, cc.LeaderLeaseTimeout = c.ElectionTimeout, c.ElectionTimeout, c.ElectionTimeout
	}
	if store != nil {
		peer := store.PeerClientConfig()
		cc.TLS = cluster.TLS{RaftServer: store.PeerServerConfig(), RaftClient: peer, HTTPClient: peer}
	}
	return cc
}

func (n *Node) apiConfig(store *tlsutil.Store) httpapi.Config {
	ac := httpapi.Config{
		Version: version.Version,
		Commit:  version.Get().Commit,
		Logger:  n.cfg.Logger,
		ACL:     n.cfg.ACL,
		Limits:  httpapi.Limits{MinTTL: n.cfg.MinSessionTTL},
	}
	if store != nil {
		ac.TLS, ac.ForwardTLS, ac.IsNode = store.APIServerConfig(false), store.PeerClientConfig(), store.IsNode
		ac.Certificate = store.Certificate
	}
	return ac
}

// loadTLS loads the node's TLS files, or returns nil when TLS is off.
func loadTLS(cfg Config) (*tlsutil.Store, error) {
	if !cfg.TLS.on() {
		return nil, nil
	}
	s, err := tlsutil.New(tlsutil.Files{CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile, CAFile: cfg.TLS.CAFile},
		0, cfg.Logger.Named("tls"))
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	return s, nil
}

// Client returns the node's client: every request reaches this node in memory, and the node
// forwards to the leader what the leader must do. It carries Config.Token. Close closes it;
// do not close it yourself.
func (n *Node) Client() *client.Client { return n.client }

// NewClient returns another client bound to this node in memory, e.g. with another token
// (client.WithToken); the caller closes it. WithTLSConfig cannot go with it: the client has no
// connection to secure.
func (n *Node) NewClient(opts ...client.Option) (*client.Client, error) {
	return client.New([]string{n.endpoint}, append([]client.Option{client.WithTransport(n.api.Transport())}, opts...)...)
}

// Handler returns the node's HTTP API, to serve on a mux of the program's own, under /v1/
// (and /metrics, for Prometheus): mux.Handle("/v1/", node.Handler()).
func (n *Node) Handler() http.Handler { return n.api.Handler() }

// ID returns the node's id.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr returns the address the other members reach this node at, for their Join.
func (n *Node) RaftAddr() string { return n.adv }

// HTTPAddr returns the address the HTTP API listens on with Config.HTTPAddr (its port chosen
// if the config said 0), or "" without it.
func (n *Node) HTTPAddr() string { return n.httpAddr }

// Cluster returns the Raft node underneath, for what the client does not offer (its status,
// membership changes); package cluster documents it.
func (n *Node) Cluster() *cluster.Node { return n.node }

// WaitLeader waits until the node knows a leader it can forward to, or ctx ends.
func (n *Node) WaitLeader(ctx context.Context) error {
	if _, _, err := n.node.WaitLeader(ctx); err != nil {
		return fmt.Errorf("embed: %w", err)
	}
	return nil
}

// Done is closed once the node has stopped: after Close, or on its own when it cannot go on (a
// failed write to its disk, a server of its API that failed, its removal from the cluster);
// Err says why.
func (n *Node) Done() <-chan struct{} { return n.done }

// Err returns nil while the node runs, ErrClosed after Close, and otherwise why it stopped: an
// error matching cluster.ErrStorageFailed when its disk failed, ErrRemoved when the cluster
// removed it, or the failure of a server of its API (its listener closed under it).
func (n *Node) Err() error {
	select {
	case <-n.done:
		return n.err
	default:
		return nil
	}
}

// Close stops the node gracefully: it stops taking requests (its clients' included: close the
// sessions first), hands leadership over if it leads, snapshots, and closes. Whatever still
// runs when ctx ends is cut off. Closing a node that already stopped does nothing.
func (n *Node) Close(ctx context.Context) error {
	var err error
	n.stopOnce.Do(func() {
		close(n.closing)
		n.client.Close()
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		apiErr := n.api.Shutdown(hctx)
		cancel()
		err = errors.Join(apiErr, n.node.Shutdown(ctx))
		n.end(ErrClosed)
	})
	n.wg.Wait()
	return err
}

// halt stops the node at once, as a crash would from the cluster's point of view, for cause.
func (n *Node) halt(cause error) {
	n.stopOnce.Do(func() {
		close(n.closing)
		if n.client != nil {
			n.client.Close()
		}
		n.api.Close()
		if err := n.node.Close(); err != nil {
			n.cfg.Logger.Warn("closing the node", "error", err)
		}
		n.end(cause)
	})
}

func (n *Node) end(cause error) {
	if n.cfg.Metrics != nil && n.api != nil {
		n.api.UnregisterMetrics(n.cfg.Metrics)
	}
	n.err = cause
	close(n.done)
	if cause != ErrClosed {
		n.cfg.Logger.Error("embedded node stopped", "error", cause)
	}
}

// serve runs a server of the API until it stops; a failure stops the node.
func (n *Node) serve(what string, run func() error) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := run(); err != nil {
			n.fail(fmt.Errorf("embed: node stopped: serving %s: %w", what, err))
		}
	}()
}

// storageFailed is cluster's OnStorageFailure: it runs on Raft's write path, so it only passes
// the failure on; the monitor stops the node.
func (n *Node) storageFailed(err error) {
	n.fail(fmt.Errorf("embed: node stopped: %w: %w", cluster.ErrStorageFailed, err))
}

// fail reports a fatal error to the monitor; only the first counts.
func (n *Node) fail(err error) {
	select {
	case n.failed <- err:
	default:
	}
}

// monitor stops the node on a fatal error.
func (n *Node) monitor() {
	defer n.wg.Done()
	select {
	case <-n.closing:
	case err := <-n.failed:
		n.halt(err)
	case <-n.node.Removed():
		n.halt(ErrRemoved)
	}
}
