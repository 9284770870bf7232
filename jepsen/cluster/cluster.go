package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/jepsen/proxy"
	"github.com/raftlock/raftlock/tlsutil"
)

// Options describe a cluster to start.
type Options struct {
	// Binary is the raftlock executable (see Build).
	Binary string
	// StartBinary, when set, is the executable the nodes (and the spare) start on instead of
	// Binary: an upgrade run starts the cluster on an older build (see Node.SetBinary).
	StartBinary string
	// Dir holds one data directory and one log file per node.
	Dir string
	// Nodes is the number of nodes (3 or 5).
	Nodes int
	// LogLevel is the agents' --log-level (default info).
	LogLevel string
	// HeartbeatTimeout, ElectionTimeout and LeaderLeaseTimeout tune Raft; zero keeps the
	// agent's default.
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout time.Duration
	// ClockSkew sets the nodes' wall clocks apart: node i (from 0) writes its clock plus
	// (i − (Nodes−1)/2)·ClockSkew into commands, so that the middle node keeps the true time.
	ClockSkew time.Duration
	// ExtraArgs are appended to every agent's command line.
	ExtraArgs []string
	// Secure runs the nodes with TLS (the API and Raft, certificates of a CA made for the run in
	// Dir/tls) and --acl; Start bootstraps the management token the harness then uses.
	Secure bool
	// FaultFS puts each node's data directory on a fault-injecting file system (package
	// faultfs, mounted with FUSE from this process), so that nodes can lose power and disks
	// can fail (see Node.Disk).
	FaultFS bool
}

// Cluster is a running set of agent processes and the proxies between them.
type Cluster struct {
	// Nodes are the members, in id order.
	Nodes []*Node
	// Spare is one more node, n<len(Nodes)+1>, with ports and a data directory of its own,
	// not started and not a member: the membership nemesis adds it and removes it again. Its
	// flags name neither --initial-cluster nor --join, so started as it is it waits to be
	// added (POST /v1/cluster/members).
	Spare *Node
	// Mesh carries every node's Raft traffic to its peers.
	Mesh *proxy.Mesh

	offsets map[string]time.Duration // each node's --clock-offset

	hc    *http.Client
	tls   *tls.Config // trusts the cluster's CA; nil unless Options.Secure
	ca    *tlsutil.CA // the cluster's CA; nil unless Options.Secure
	token string      // the harness's management token, once bootstrapped
}

// Agents listen below Linux's ephemeral range (32768 and up), so that a restarted node never
// finds its port taken by the local end of some outgoing connection.
const (
	portLow  = 12000
	portHigh = 32000
)

// reservePorts binds n distinct free ports of 127.0.0.1 in [portLow, portHigh). The caller
// keeps them bound while it lays out the rest of the cluster (so that no proxy can be given one)
// and releases them just before the agents start.
func reservePorts(n int) ([]net.Listener, error) {
	var lns []net.Listener
	fail := func(err error) ([]net.Listener, error) {
		for _, ln := range lns {
			ln.Close()
		}
		return nil, err
	}
	start := portLow + rand.Intn(portHigh-portLow)
	for i := 0; i < portHigh-portLow && len(lns) < n; i++ {
		port := portLow + (start-portLow+i)%(portHigh-portLow)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			lns = append(lns, ln)
		}
	}
	if len(lns) < n {
		return fail(fmt.Errorf("cluster: only %d free ports in [%d, %d)", len(lns), portLow, portHigh))
	}
	return lns, nil
}

func portOf(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// New lays out the cluster (addresses, directories, proxies) without starting processes.
func New(opts Options) (*Cluster, error) {
	if opts.Nodes < 1 {
		return nil, errors.New("cluster: need at least one node")
	}
	reserved, err := reservePorts(2 * (opts.Nodes + 1))
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, ln := range reserved {
			ln.Close()
		}
	}()
	c := &Cluster{hc: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	raft := map[string]string{}
	binary := opts.Binary
	if opts.StartBinary != "" {
		binary = opts.StartBinary
	}
	for i := 0; i <= opts.Nodes; i++ {
		id := fmt.Sprintf("n%d", i+1)
		n := &Node{
			ID:       id,
			HTTPAddr: fmt.Sprintf("127.0.0.1:%d", portOf(reserved[2*i])),
			RaftAddr: fmt.Sprintf("127.0.0.1:%d", portOf(reserved[2*i+1])),
			DataDir:  filepath.Join(opts.Dir, id, "data"),
			LogPath:  filepath.Join(opts.Dir, id+".log"),
			binary:   binary,
			state:    Stopped,
		}
		if err := os.MkdirAll(n.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
		if i == opts.Nodes {
			c.Spare = n
			break
		}
		raft[id] = n.RaftAddr
		c.Nodes = append(c.Nodes, n)
		if opts.FaultFS {
			if err := n.mountDisk(opts.Dir); err != nil {
				c.unmountDisks()
				return nil, err
			}
		}
	}
	if c.Mesh, err = proxy.NewMesh(raft); err != nil {
		c.unmountDisks()
		return nil, err
	}
	var initial []string
	for _, n := range c.Nodes {
		initial = append(initial, n.ID+"="+n.RaftAddr)
	}
	var secure map[string][]string
	if opts.Secure {
		if secure, c.tls, c.ca, err = secureSetup(filepath.Join(opts.Dir, "tls"), append(c.IDs(), c.Spare.ID)); err != nil {
			c.Mesh.Close()
			c.unmountDisks()
			return nil, err
		}
		c.hc = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: c.tls}}
	}
	c.offsets = map[string]time.Duration{}
	c.Spare.args = append(agentArgs(opts, c.Spare, "", ""), secure[c.Spare.ID]...)
	for i, n := range c.Nodes {
		n.args = append(agentArgs(opts, n, strings.Join(initial, ","), c.Mesh.PeerAddrs(n.ID)), secure[n.ID]...)
		if opts.ClockSkew != 0 {
			offset := time.Duration(float64(opts.ClockSkew) * (float64(i) - float64(opts.Nodes-1)/2))
			n.args = append(n.args, "--clock-offset", offset.String())
			c.offsets[n.ID] = offset
		}
	}
	return c, nil
}

func agentArgs(opts Options, n *Node, initial, peers string) []string {
	level := opts.LogLevel
	if level == "" {
		level = "info"
	}
	args := []string{"agent",
		"--id", n.ID,
		"--data-dir", n.DataDir,
		"--http-addr", n.HTTPAddr,
		"--raft-addr", n.RaftAddr,
		"--log-level", level,
		"--log-format", "text",
	}
	if initial != "" {
		args = append(args, "--initial-cluster", initial)
	}
	if peers != "" {
		args = append(args, "--raft-peer-addrs", peers)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"--heartbeat-timeout", opts.HeartbeatTimeout},
		{"--election-timeout", opts.ElectionTimeout},
		{"--leader-lease-timeout", opts.LeaderLeaseTimeout},
	} {
		if d.v > 0 {
			args = append(args, d.flag, d.v.String())
		}
	}
	return append(args, opts.ExtraArgs...)
}

// all are the members and the spare.
func (c *Cluster) all() []*Node {
	if c.Spare == nil {
		return c.Nodes
	}
	return append(append([]*Node(nil), c.Nodes...), c.Spare)
}

// ClockOffset is how far the node's wall clock is set from the true time (see Options.ClockSkew).
func (c *Cluster) ClockOffset(id string) time.Duration { return c.offsets[id] }

// Start lays out the cluster, starts every node and waits until all are ready.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := New(opts)
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if err := n.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if c.tls != nil {
		if err := c.bootstrap(ctx); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitReady(ctx); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.WaitFeatures(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Node returns the node with the given id, or nil.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// HTTPAddrs are the nodes' HTTP addresses, in id order.
func (c *Cluster) HTTPAddrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.HTTPAddr
	}
	return out
}

// IDs are the node ids, in order.
func (c *Cluster) IDs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.ID
	}
	return out
}

// Close ends every process (SIGKILL to each process group, after SIGCONT so none stays
// stopped), stops the proxies and unmounts the nodes' file systems. It is safe to call more
// than once.
func (c *Cluster) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, n := range c.all() {
		if n.State() == Stopped {
			continue
		}
		if n.State() == Paused {
			n.Resume()
		}
		if err := n.Kill(ctx); err != nil && !errors.Is(err, ErrNotRunning) {
			errs = append(errs, err)
		}
	}
	if c.Mesh != nil {
		if err := c.Mesh.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.unmountDisks(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// StopAll sends SIGTERM to every running node at once, as an operator stopping the whole
// cluster would, and waits for each to exit within the timeout. It returns, by node id, the
// error of each node that did not stop gracefully (it was killed).
func (c *Cluster) StopAll(ctx context.Context, timeout time.Duration) map[string]error {
	var (
		mu   sync.Mutex
		errs = map[string]error{}
		wg   sync.WaitGroup
	)
	for _, n := range c.Nodes {
		if n.State() == Stopped {
			continue
		}
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := n.Stop(sctx); err != nil {
				mu.Lock()
				errs[n.ID] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errs
}
