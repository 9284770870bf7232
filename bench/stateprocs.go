//go:build linux

package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/api"
)

// agentProc is one `raftlock agent` process the state workload started.
type agentProc struct {
	id, http, raft string
	dataDir, log   string
	args           []string
	cmd            *exec.Cmd
	exited         chan struct{}
}

// agentCluster is the agents of the state workload: a cluster it starts, stops and starts
// again, on free ports of 127.0.0.1.
type agentCluster struct {
	bin, dir string
	extra    []string
	nodes    []*agentProc
	hc       *http.Client
	// slow is for a forced collection and heap profile, which take tens of seconds with a
	// million locks on a loaded machine.
	slow *http.Client
}

// freeAddrs returns n free host:ports of 127.0.0.1.
func freeAddrs(n int) ([]string, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("bench: state: free port: %w", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// startAgentCluster starts n agents of bin bootstrapped together, with the extra flags.
func startAgentCluster(ctx context.Context, bin, dir string, n int, extra []string) (*agentCluster, error) {
	addrs, err := freeAddrs(2 * n)
	if err != nil {
		return nil, err
	}
	c := &agentCluster{bin: bin, dir: dir, extra: extra, hc: &http.Client{Timeout: 10 * time.Second},
		slow: &http.Client{Timeout: 5 * time.Minute}}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("n%d=%s", i+1, addrs[2*i+1]))
	}
	for i := range n {
		p := &agentProc{id: fmt.Sprintf("n%d", i+1), http: addrs[2*i], raft: addrs[2*i+1]}
		p.dataDir, p.log = filepath.Join(dir, p.id), filepath.Join(dir, p.id+".log")
		p.args = []string{"--initial-cluster", strings.Join(initial, ",")}
		c.nodes = append(c.nodes, p)
	}
	for _, p := range c.nodes {
		if err := c.start(p); err != nil {
			c.kill()
			return nil, err
		}
	}
	if err := c.waitReady(ctx, c.nodes); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// start starts p's process.
func (c *agentCluster) start(p *agentProc) error {
	out, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("bench: state: %w", err)
	}
	defer out.Close()
	args := append([]string{"agent", "--id", p.id, "--data-dir", p.dataDir, "--http-addr", p.http,
		"--raft-addr", p.raft, "--log-level", "warn", "--enable-pprof"}, p.args...)
	cmd := exec.Command(c.bin, append(args, c.extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("bench: state: start %s: %w", p.id, err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.exited)
	return nil
}

// stop sends p SIGTERM (a graceful stop: it hands leadership over and snapshots) and waits.
func (c *agentCluster) stop(p *agentProc) error {
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("bench: state: %s did not stop within 2 minutes of SIGTERM; killed", p.id)
	}
	p.cmd = nil
	return nil
}

// kill SIGKILLs every process still running.
func (c *agentCluster) kill() {
	for _, p := range c.nodes {
		if p.cmd != nil {
			_ = p.cmd.Process.Kill()
			<-p.exited
			p.cmd = nil
		}
	}
}

func (c *agentCluster) endpoints() []string {
	var eps []string
	for _, p := range c.nodes {
		eps = append(eps, "http://"+p.http)
	}
	return eps
}

// health reads GET /v1/health of p.
func (c *agentCluster) health(ctx context.Context, p *agentProc) (*api.Health, error) {
	var h api.Health
	err := c.getJSON(ctx, "http://"+p.http+"/v1/health", &h)
	return &h, err
}

// cluster reads GET /v1/cluster of p, stale (its own view) or not.
func (c *agentCluster) cluster(ctx context.Context, p *agentProc, stale bool) (*api.Cluster, error) {
	u := "http://" + p.http + "/v1/cluster"
	if stale {
		u += "?consistency=stale"
	}
	var cl api.Cluster
	err := c.getJSON(ctx, u, &cl)
	return &cl, err
}

func (c *agentCluster) getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, bytes.TrimSpace(b))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// waitReady waits until each of ps answers ready and knows a leader whose HTTP address every
// member has published.
func (c *agentCluster) waitReady(ctx context.Context, ps []*agentProc) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	for _, p := range ps {
		for {
			cl, err := c.cluster(ctx, p, true)
			if err == nil && cl.Leader != "" && c.ready(ctx, p) {
				published := 0
				for _, m := range cl.Members {
					if m.HTTPAddr != "" {
						published++
					}
				}
				if published == len(cl.Members) {
					break
				}
			}
			if p.cmd == nil || isClosed(p.exited) {
				return fmt.Errorf("bench: state: %s exited; see %s", p.id, p.log)
			}
			if !sleep(ctx, 50*time.Millisecond) {
				return fmt.Errorf("bench: state: %s not ready: %w (log %s)", p.id, ctx.Err(), p.log)
			}
		}
	}
	return nil
}

func (c *agentCluster) ready(ctx context.Context, p *agentProc) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+"/v1/ready", nil)
	if err != nil {
		return false
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// leader returns the node that leads, as the nodes see it.
func (c *agentCluster) leader(ctx context.Context) (*agentProc, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		for _, p := range c.nodes {
			if p.cmd == nil {
				continue
			}
			cl, err := c.cluster(ctx, p, true)
			if err != nil || cl.Leader == "" {
				continue
			}
			for _, q := range c.nodes {
				if q.id == cl.Leader && q.cmd != nil {
					if lc, err := c.cluster(ctx, q, true); err == nil && lc.Leader == q.id {
						return q, nil
					}
				}
			}
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return nil, fmt.Errorf("bench: state: no leader: %w", ctx.Err())
		}
	}
}

// heap forces a garbage collection in p (through its pprof endpoint) and returns its live
// heap and resident memory from /metrics.
func (c *agentCluster) heap(ctx context.Context, p *agentProc) (heapBytes, rssBytes float64, err error) {
	for range 2 { // the second collection frees what finalizers of the first kept
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+"/debug/pprof/heap?gc=1", nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := c.slow.Do(req)
		if err != nil {
			return 0, 0, fmt.Errorf("bench: state: heap of %s: %w", p.id, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m, err := scrapeMetrics(ctx, c.hc, "http://"+p.http)
	if err != nil {
		return 0, 0, err
	}
	return m["go_memstats_heap_alloc_bytes"], m[metricRSS], nil
}

// peakRSS returns the high-water mark of p's resident memory (VmHWM).
func peakRSS(p *agentProc) (float64, error) {
	if p.cmd == nil {
		return 0, errors.New("not running")
	}
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// resetPeakRSS sets p's high-water mark of resident memory to its current resident memory.
func resetPeakRSS(p *agentProc) error {
	if p.cmd == nil {
		return errors.New("not running")
	}
	return os.WriteFile(filepath.Join("/proc", strconv.Itoa(p.cmd.Process.Pid), "clear_refs"), []byte("5"), 0)
}
