package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/fsm"
)

// DevOptions configure an in-process development cluster.
type DevOptions struct {
	// Nodes is the cluster size; default 3.
	Nodes int
	// DataDir holds one directory per node; default a new temporary directory, removed by Close.
	DataDir string
	// BasePort numbers the ports: node i serves HTTP on BasePort+i and Raft on BasePort+100+i.
	// Zero picks free ports on 127.0.0.1 (what tests use).
	BasePort int
	// Logger receives every node's logs; default discards.
	Logger hclog.Logger
	// LogStore is every new node's Raft log store ("wal" or "boltdb"); empty means what the
	// data dir holds, and wal for a new one.
	LogStore string
	// TLS writes a CA, a certificate per node and a client certificate into DataDir/tls (keeping
	// those already there) and runs every node with TLS: the API over HTTPS, Raft over mutual TLS.
	TLS bool
	// ACL runs every node with --acl and bootstraps the cluster once: the management token's
	// secret goes into DataDir/management-token (mode 0600), which a restart on the same
	// DataDir reads again; it is also each node's agent token.
	ACL bool
	// Tune, if set, adjusts each node's config before it starts (tests shorten timeouts).
	Tune func(*config.Config)
	// Console gives every node a console listener (--console-addr) on a free port of
	// 127.0.0.1; it needs TLS and ACL.
	Console bool
	// ReturnWhenReady makes StartDev return as soon as a node answers GET /v1/ready, as a
	// script that starts a cluster and polls its readiness would, rather than once every
	// node's address is published and the features are enabled.
	ReturnWhenReady bool
	// NodeStopped is told when a node must stop for good (a failed write to its Raft log, an
	// entry only a newer version applies), with the status an agent alone in its process
	// exits with (ExitStorageFailure, ExitRefused). The node stops alone, as if its machine had
	// failed; the process and the other nodes go on, and Kill then Restart starts it again.
	// Default: a line on standard error.
	NodeStopped func(id string, status int, err error)
}

// Dev is a cluster of agents in one process, on 127.0.0.1.
type Dev struct {
	opts    DevOptions
	tempDir bool

	tls   *DevTLSFiles
	token string // the management token's secret, with ACL

	mu      sync.Mutex
	agents  []*Agent
	configs []config.Config
}

// StartDev starts a development cluster and waits until it has a leader ready to serve.
func StartDev(ctx context.Context, opts DevOptions) (*Dev, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	d := &Dev{opts: opts}
	if d.opts.DataDir == "" {
		dir, err := os.MkdirTemp("", "raftlock-dev-")
		if err != nil {
			return nil, fmt.Errorf("agent: dev data dir: %w", err)
		}
		d.opts.DataDir, d.tempDir = dir, true
	}
	httpLns, raftLns, err := d.listen()
	if err != nil {
		d.removeTemp()
		return nil, err
	}
	initial := make(map[string]string)
	ids := make([]string, len(raftLns))
	for i, ln := range raftLns {
		ids[i] = nodeID(i)
		initial[ids[i]] = ln.Addr().String()
	}
	if opts.TLS {
		files, err := writeDevTLS(filepath.Join(d.opts.DataDir, "tls"), ids)
		if err != nil {
			for _, ln := range append(httpLns, raftLns...) {
				ln.Close()
			}
			d.removeTemp()
			return nil, err
		}
		d.tls = &files
	}
	if opts.ACL {
		if d.token, err = readDevToken(d.opts.DataDir); err != nil {
			for _, ln := range append(httpLns, raftLns...) {
				ln.Close()
			}
			d.removeTemp()
			return nil, err
		}
	}
	d.agents = make([]*Agent, opts.Nodes)
	d.configs = make([]config.Config, opts.Nodes)
	for i := range opts.Nodes {
		cfg := config.Default()
		cfg.ID = nodeID(i)
		cfg.DataDir = filepath.Join(d.opts.DataDir, cfg.ID)
		cfg.HTTPAddr = httpLns[i].Addr().String()
		cfg.RaftAddr = raftLns[i].Addr().String()
		cfg.InitialCluster = initial
		if opts.LogStore != "" {
			cfg.LogStore = opts.LogStore
		}
		if d.tls != nil {
			cfg.TLSCertFile, cfg.TLSKeyFile = d.tls.NodeFiles(cfg.ID)
			cfg.TLSCAFile = d.tls.CAFile
		}
		if opts.ACL {
			cfg.ACL, cfg.AgentToken = true, d.token
		}
		if opts.Tune != nil {
			opts.Tune(&cfg)
		}
		d.configs[i] = cfg
	}
	consoleLns := make([]net.Listener, opts.Nodes)
	if opts.Console {
		for i := range opts.Nodes {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				for _, ln := range append(append(httpLns, raftLns...), consoleLns...) {
					if ln != nil {
						ln.Close()
					}
				}
				d.removeTemp()
				return nil, fmt.Errorf("agent: dev: %w", err)
			}
			consoleLns[i], d.configs[i].ConsoleAddr = ln, ln.Addr().String()
		}
	}
	// All at once, as the machines of a cluster come up: a node with a new data directory asks
	// the others whether the cluster counts it already before it bootstraps, and one still
	// waiting for its turn to start would hold that question until its timeout.
	errs := make([]error, opts.Nodes)
	var wg sync.WaitGroup
	for i := range opts.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := d.configs[i]
			d.agents[i], errs[i] = start(ctx, cfg, opts.Logger.Named(cfg.ID), Listeners{HTTP: httpLns[i], Raft: raftLns[i], Console: consoleLns[i]}, d.halt(cfg.ID))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		d.Close()
		return nil, err
	}
	wait := d.waitPublished
	if opts.ReturnWhenReady {
		wait = d.waitReady
	}
	if err := wait(ctx); err != nil {
		d.Close()
		return nil, err
	}
	if opts.ACL {
		if err := d.bootstrapACL(ctx); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// waitPublished waits until a leader is ready and every node's HTTP address is in the log, so
// that any node can forward from the start, and the features every node supports are enabled.
func (d *Dev) waitPublished(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	want := len(fsm.AllFeatures())
	for _, cfg := range d.configs {
		if len(cfg.DisableFeatures) > 0 {
			want = 0 // a test of rolling upgrades waits for what it needs itself
		}
	}
	for {
		i, err := d.WaitLeader(ctx)
		if err != nil {
			return err
		}
		if a := d.Agent(i); a != nil && len(a.Node().FSM().Members()) >= len(d.configs) &&
			len(a.Node().FSM().Features()) >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent: dev: members not published or features not enabled: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// waitReady waits until a node answers GET /v1/ready with 200.
func (d *Dev) waitReady(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		for i := range d.configs {
			if a := d.Agent(i); a != nil && a.Node().Ready(ctx) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent: dev: no node ready: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func nodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

func (d *Dev) listen() (httpLns, raftLns []net.Listener, err error) {
	closeAll := func() {
		for _, ln := range append(httpLns, raftLns...) {
			ln.Close()
		}
	}
	for i := range d.opts.Nodes {
		httpAddr, raftAddr := "127.0.0.1:0", "127.0.0.1:0"
		if d.opts.BasePort != 0 {
			httpAddr = fmt.Sprintf("127.0.0.1:%d", d.opts.BasePort+i)
			raftAddr = fmt.Sprintf("127.0.0.1:%d", d.opts.BasePort+100+i)
		}
		h, err := net.Listen("tcp", httpAddr)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("agent: dev: %w", err)
		}
		httpLns = append(httpLns, h)
		r, err := net.Listen("tcp", raftAddr)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("agent: dev: %w", err)
		}
		raftLns = append(raftLns, r)
	}
	return httpLns, raftLns, nil
}

// Endpoints returns every node's base URL, e.g. "http://127.0.0.1:7001" ("https://" with TLS).
func (d *Dev) Endpoints() []string {
	out := make([]string, len(d.configs))
	for i, c := range d.configs {
		scheme := "http://"
		if c.TLS() {
			scheme = "https://"
		}
		out[i] = scheme + c.HTTPAddr
	}
	return out
}

// ConsoleEndpoints returns every node's console listener base URL ("https://..."), or nil
// without DevOptions.Console.
func (d *Dev) ConsoleEndpoints() []string {
	if !d.opts.Console {
		return nil
	}
	out := make([]string, len(d.configs))
	for i, c := range d.configs {
		out[i] = "https://" + c.ConsoleAddr
	}
	return out
}

// TLSFiles returns the cluster's CA and client certificate files; ok is false without TLS.
func (d *Dev) TLSFiles() (files DevTLSFiles, ok bool) {
	if d.tls == nil {
		return DevTLSFiles{}, false
	}
	return *d.tls, true
}

// Agent returns node i's agent, or nil while it is stopped.
func (d *Dev) Agent(i int) *Agent {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.agents[i]
}

// Config returns node i's configuration, as Restart starts it.
func (d *Dev) Config(i int) config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.configs[i]
}

// Size returns the number of nodes.
func (d *Dev) Size() int { return len(d.configs) }

// DataDir returns the directory that holds the nodes' data directories.
func (d *Dev) DataDir() string { return d.opts.DataDir }

// WaitLeader waits until a running node leads and is ready to serve, and returns its index.
func (d *Dev) WaitLeader(ctx context.Context) (int, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		for i := range d.configs {
			if a := d.Agent(i); a != nil && a.Node().IsLeader() {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("agent: dev: no leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Kill stops node i at once, as a crash would (no leadership transfer).
func (d *Dev) Kill(i int) error {
	d.mu.Lock()
	a := d.agents[i]
	d.agents[i] = nil
	d.mu.Unlock()
	if a == nil {
		return fmt.Errorf("agent: dev: node %d is not running", i)
	}
	a.Kill()
	return nil
}

// Restart starts node i again from its data directory, on the same addresses.
func (d *Dev) Restart(ctx context.Context, i int) error {
	return d.RestartWith(ctx, i, nil)
}

// RestartWith starts node i again like Restart, with its config changed by tune (if set) from
// then on: an upgrade, say.
func (d *Dev) RestartWith(ctx context.Context, i int, tune func(*config.Config)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.agents[i] != nil {
		return fmt.Errorf("agent: dev: node %d is running", i)
	}
	if tune != nil {
		tune(&d.configs[i])
	}
	cfg := d.configs[i]
	a, err := start(ctx, cfg, d.opts.Logger.Named(cfg.ID), Listeners{}, d.halt(cfg.ID))
	if err != nil {
		return err
	}
	d.agents[i] = a
	return nil
}

// halt is what node id does when it must stop for good: it tells NodeStopped, and its agent
// stops (start's contract) without ending the process, which holds the other nodes too.
func (d *Dev) halt(id string) func(status int, err error) {
	return func(status int, err error) {
		if d.opts.NodeStopped != nil {
			d.opts.NodeStopped(id, status, err)
			return
		}
		fmt.Fprintf(os.Stderr, "raftlock dev: node %s stopped on its own (an agent alone would exit with status %d): %v\n", id, status, err)
	}
}

// Close stops every node and removes a temporary data directory. Nodes stop at once, like
// Kill: acknowledged state is already durable, and a dev cluster has no one to hand over to.
func (d *Dev) Close() error {
	for i := range d.agents {
		d.mu.Lock()
		a := d.agents[i]
		d.agents[i] = nil
		d.mu.Unlock()
		if a != nil {
			a.Kill()
		}
	}
	d.removeTemp()
	return nil
}

func (d *Dev) removeTemp() {
	if d.tempDir {
		_ = os.RemoveAll(d.opts.DataDir)
	}
}
