//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// procNode is one `raftlock agent` process of a test, which may run several times (restart,
// upgrade) on the same addresses and data directory.
type procNode struct {
	id, dir            string
	httpAddr, raftAddr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current run ended
	log  *syncBuffer   // every run's output, one after the other
}

// procCluster is a set of agent processes on 127.0.0.1, stopped by their pids when the test
// ends.
type procCluster struct {
	t     *testing.T
	nodes map[string]*procNode
	ids   []string
}

// newProcCluster lays out nodes ids (free ports, a data directory each) without starting them.
func newProcCluster(t *testing.T, ids ...string) *procCluster {
	t.Helper()
	c := &procCluster{t: t, nodes: map[string]*procNode{}}
	dir := t.TempDir()
	ports := freePorts(t, 2*len(ids))
	for i, id := range ids {
		c.add(id, filepath.Join(dir, id), ports[2*i], ports[2*i+1])
	}
	t.Cleanup(func() {
		for _, id := range c.ids {
			c.stop(id)
		}
		if t.Failed() {
			for _, id := range c.ids {
				t.Logf("--- %s's log:\n%s", id, c.nodes[id].log)
			}
		}
	})
	return c
}

func (c *procCluster) add(id, dir string, httpPort, raftPort int) *procNode {
	p := &procNode{id: id, dir: dir, log: &syncBuffer{},
		httpAddr: fmt.Sprintf("127.0.0.1:%d", httpPort), raftAddr: fmt.Sprintf("127.0.0.1:%d", raftPort)}
	c.nodes[id] = p
	c.ids = append(c.ids, id)
	return p
}

// grow lays out one more node on free ports.
func (c *procCluster) grow(id string) *procNode {
	c.t.Helper()
	ports := freePorts(c.t, 2)
	return c.add(id, filepath.Join(c.t.TempDir(), id), ports[0], ports[1])
}

// initial is the --initial-cluster value of the nodes ids.
func (c *procCluster) initial(ids ...string) string {
	var parts []string
	for _, id := range ids {
		parts = append(parts, id+"="+c.nodes[id].raftAddr)
	}
	return strings.Join(parts, ",")
}

// start starts node id with args after its own --id, --data-dir and addresses.
func (c *procCluster) start(id string, args ...string) {
	c.t.Helper()
	p := c.nodes[id]
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.done) {
		c.t.Fatalf("%s runs already", id)
	}
	all := append([]string{"agent", "--id", id, "--data-dir", p.dir, "--http-addr", p.httpAddr,
		"--raft-addr", p.raftAddr, "--log-level", "info"}, args...)
	cmd := exec.Command(cliEnv.bin, all...)
	fmt.Fprintf(p.log, "### raftlock %s\n", strings.Join(all, " "))
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(p.done)
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stop stops node id with SIGTERM (SIGKILL after 15 s) if it runs, and waits for it.
func (c *procCluster) stop(id string) { c.signal(id, syscall.SIGTERM) }

// kill stops node id with SIGKILL, as a crash, and waits for it.
func (c *procCluster) kill(id string) { c.signal(id, syscall.SIGKILL) }

func (c *procCluster) signal(id string, sig syscall.Signal) {
	p := c.nodes[id]
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || closed(done) {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// exited waits up to timeout for node id's process to end on its own, and returns its exit
// code, or -1 if it still runs.
func (c *procCluster) exited(id string, timeout time.Duration) int {
	p := c.nodes[id]
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// endpoints returns the API URLs of nodes ids (every node when none is named).
func (c *procCluster) endpoints(ids ...string) []string {
	if len(ids) == 0 {
		ids = c.ids
	}
	var out []string
	for _, id := range ids {
		out = append(out, "http://"+c.nodes[id].httpAddr)
	}
	return out
}

// client returns a Go client of nodes ids, closed when the test ends.
func (c *procCluster) client(ids ...string) *client.Client {
	c.t.Helper()
	cl, err := client.New(c.endpoints(ids...), client.WithRetryTimeout(30*time.Second))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// cli runs the raftlock binary against nodes ids and returns how it ended.
func (c *procCluster) cli(ids []string, args ...string) cliResult {
	c.t.Helper()
	cmd := exec.Command(cliEnv.bin, args...)
	cmd.Env = append(os.Environ(), endpointsEnv+"="+strings.Join(c.endpoints(ids...), ","))
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	return finish(c.t, cmd, &stdout, &stderr, 90*time.Second)
}

// mustCLI is cli that fails the test unless the command exits 0.
func (c *procCluster) mustCLI(ids []string, args ...string) string {
	c.t.Helper()
	r := c.cli(ids, args...)
	if r.code != 0 {
		c.t.Fatalf("raftlock %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// waitCluster waits until node via answers GET /v1/cluster (linearizable) with a leader and
// exactly the voters ids, each with its HTTP address published and its report read.
func (c *procCluster) waitCluster(via string, ids ...string) api.Cluster {
	c.t.Helper()
	cl := c.client(via)
	var got api.Cluster
	testkit.Eventually(c.t, 60*time.Second, fmt.Sprintf("%s to see voters %v", via, ids), func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := cl.Raw().Cluster(ctx)
		if err != nil || r.Leader == "" {
			return false
		}
		var voters []string
		for _, m := range r.Members {
			if m.Suffrage != api.SuffrageVoter || m.HTTPAddr == "" || m.Version == "" {
				return false
			}
			voters = append(voters, m.ID)
		}
		slices.Sort(voters)
		got = *r
		return slices.Equal(voters, slices.Sorted(slices.Values(ids)))
	})
	return got
}

// checkLogs fails the test if any node's output shows a panic or an entry it could not apply.
func (c *procCluster) checkLogs() {
	c.t.Helper()
	for _, id := range c.ids {
		out := c.nodes[id].log.String()
		for _, bad := range []string{"panic", "needs a newer raftlock", "DATA RACE"} {
			if strings.Contains(out, bad) {
				c.t.Errorf("%s's log shows %q", id, bad)
			}
		}
	}
}

// lockTable returns every held, awaited or delayed lock as node via sees it (linearizable).
func lockTable(t *testing.T, cl *client.Client) []api.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locks, err := cl.Raw().Locks(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	return locks
}

// sessionWorkers runs work in workers goroutines, each on a session of its own (TTL ttl) from
// cl, until the returned stop is called; stop returns once they have all ended and may be
// called again. A worker whose session cannot be created tells failed, if set, and ends.
func sessionWorkers(cl *client.Client, workers int, ttl time.Duration, failed func(w int, err error),
	work func(ctx context.Context, w int, s *client.Session)) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { <-quit; cancel() }()
			s, err := cl.NewSession(ctx, client.WithTTL(ttl))
			if err != nil {
				if failed != nil {
					failed(w, err)
				}
				return
			}
			defer s.Close(context.Background())
			work(ctx, w, s)
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(quit); wg.Wait() }) }
}
