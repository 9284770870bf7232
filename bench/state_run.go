//go:build linux

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// RunState builds a large state on a cluster of three agent processes of opts.Binary that it
// starts on 127.0.0.1, and measures what an operator meets with it: memory per session, lock
// and waiter; a Raft snapshot and a backup, with the longest stall of lock traffic while each
// is taken; a fresh node's catch-up by snapshot; a start of the whole cluster from disk; and a
// restore of the backup. It stops the agents before it returns.
func RunState(ctx context.Context, opts StateOptions) (*StateReport, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	rep := &StateReport{Sessions: opts.Sessions, Locks: opts.Locks, Waiters: opts.Waiters,
		NumCPU: runtime.NumCPU(), CPUModel: cpuModel(), LoadAvgStart: loadAvg()}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "raftlock-state-"); err != nil {
			return nil, fmt.Errorf("bench: state: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: state: %w", err)
	}
	rep.Dir = dir
	s := &stateRun{opts: opts, rep: rep, dir: dir}
	start := time.Now()
	rep.StealPercent, err = stealDuring(func() error { return s.run(ctx) })
	rep.TotalSeconds = time.Since(start).Seconds()
	rep.LoadAvgEnd = loadAvg()
	if s.ac != nil {
		s.ac.kill()
	}
	return rep, err
}

// stateRun is one run of the state workload.
type stateRun struct {
	opts StateOptions
	rep  *StateReport
	dir  string
	ac   *agentCluster
	ids  []string // session ids, by number
	toks []uint64 // lock tokens, by number
	errs errorLog
}

func (s *stateRun) progress(format string, args ...any) {
	if s.opts.Progress != nil {
		s.opts.Progress(fmt.Sprintf(format, args...))
	}
}

func lockOf(j int) string { return fmt.Sprintf("state/l%08d", j) }

func (s *stateRun) run(ctx context.Context) error {
	extra := []string{"--max-sessions", "0", "--max-connections", "0"}
	if s.opts.LogStore != "" {
		extra = append(extra, "--log-store", s.opts.LogStore)
	}
	extra = append(extra, s.opts.AgentFlags...)
	s.progress("starting three agents in %s", s.dir)
	ac, err := startAgentCluster(ctx, s.opts.Binary, s.dir, 3, extra)
	if err != nil {
		return err
	}
	s.ac = ac
	if err := s.memory(ctx, "empty"); err != nil {
		return err
	}
	if err := s.build(ctx); err != nil {
		return err
	}
	if err := s.probeSnapshots(ctx); err != nil {
		return err
	}
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	if err := s.restart(ctx); err != nil {
		return err
	}
	return s.restore(ctx)
}

// memory records every node's heap and RSS at step.
func (s *stateRun) memory(ctx context.Context, step string) error {
	lead, err := s.ac.leader(ctx)
	if err != nil {
		return err
	}
	for _, p := range s.ac.nodes {
		if p.cmd == nil {
			continue
		}
		h, rss, err := s.ac.heap(ctx, p)
		if err != nil { // a figure missing, not a reason to end the run
			s.errs.add(err)
			s.rep.MemoryErrors++
			continue
		}
		s.rep.Memory = append(s.rep.Memory, StateMemory{Step: step, Node: p.id, Leader: p == lead, Heap: h, RSS: rss})
	}
	return nil
}

// scrape reads the /metrics of the node at endpoint, trying for up to two minutes: on a
// machine as loaded as the project's, one read can take longer than the client's 10 s.
func (s *stateRun) scrape(ctx context.Context, endpoint string) (map[string]float64, error) {
	for first := time.Now(); ; {
		m, err := scrapeMetrics(ctx, s.ac.hc, endpoint)
		if err == nil || time.Since(first) > 2*time.Minute || ctx.Err() != nil {
			return m, err
		}
		sleep(ctx, time.Second)
	}
}

// growth returns the growth of one node's heap and RSS from step a to step b: the node that
// leads at b, or (follower) a node that follows at both.
func (s *stateRun) growth(a, b string, follower bool) (heap, rss float64) {
	find := func(step, node string) *StateMemory {
		for i := range s.rep.Memory {
			if m := &s.rep.Memory[i]; m.Step == step && m.Node == node {
				return m
			}
		}
		return nil
	}
	for i := range s.rep.Memory {
		mb := &s.rep.Memory[i]
		if mb.Step != b || mb.Leader == follower {
			continue
		}
		ma := find(a, mb.Node)
		if ma == nil || (follower && ma.Leader) {
			continue
		}
		return mb.Heap - ma.Heap, mb.RSS - ma.RSS
	}
	return 0, 0
}

// leaderClient returns a client whose first endpoint is the leader's.
func (s *stateRun) leaderClient(ctx context.Context) (*client.Client, *agentProc, error) {
	lead, err := s.ac.leader(ctx)
	if err != nil {
		return nil, nil, err
	}
	eps := []string{"http://" + lead.http}
	for _, ep := range s.ac.endpoints() {
		if ep != eps[0] {
			eps = append(eps, ep)
		}
	}
	c, err := client.New(eps)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: state: %w", err)
	}
	return c, lead, nil
}

// parallel runs f(i) for i in [0, n) on the workload's clients.
func (s *stateRun) parallel(ctx context.Context, what string, n int, f func(i int) error) time.Duration {
	var next, done atomic.Int64
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				d := done.Load()
				s.progress("%s: %d/%d (%.0f/s)", what, d, n, float64(d)/time.Since(start).Seconds())
			}
		}
	}()
	var wg sync.WaitGroup
	for range min(s.opts.Clients, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				// On a machine as loaded as the project's, the cluster can be without a leader
				// for a minute: keep trying for up to ten.
				for first := time.Now(); ; {
					err := f(i)
					if err == nil {
						break
					}
					s.errs.add(err)
					if time.Since(first) > 10*time.Minute || ctx.Err() != nil {
						break
					}
					sleep(ctx, 100*time.Millisecond)
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	return time.Since(start)
}

// build creates the sessions, then the locks, then the waiters, recording memory after each.
func (s *stateRun) build(ctx context.Context) error {
	c, _, err := s.leaderClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	n := s.opts.Sessions
	s.ids = make([]string, n)
	d := s.parallel(ctx, "creating sessions", n, func(i int) error {
		sess, err := c.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: "24h", Name: fmt.Sprintf("state-%d", i)})
		if err == nil {
			s.ids[i] = sess.ID
		}
		return err
	})
	s.rep.SessionsSeconds, s.rep.SessionsPerSec = d.Seconds(), float64(n)/d.Seconds()
	if slices.Contains(s.ids, "") {
		return s.buildFailed("a session could not be created")
	}
	if err := s.memory(ctx, "sessions"); err != nil {
		return err
	}
	s.toks = make([]uint64, s.opts.Locks)
	d = s.parallel(ctx, "acquiring locks", s.opts.Locks, func(j int) error {
		res, err := c.Raw().Acquire(ctx, lockOf(j), api.AcquireRequest{Session: s.ids[j%n]})
		if err == nil {
			s.toks[j] = res.Token
		}
		return err
	})
	s.rep.LocksSeconds, s.rep.LocksPerSec = d.Seconds(), float64(s.opts.Locks)/d.Seconds()
	if slices.Contains(s.toks, 0) {
		return s.buildFailed("a lock could not be acquired")
	}
	if err := s.memory(ctx, "locks"); err != nil {
		return err
	}
	start := time.Now()
	if err := s.queueWaiters(ctx); err != nil {
		return err
	}
	s.rep.WaitersSeconds = time.Since(start).Seconds()
	if err := s.memory(ctx, "waiters"); err != nil {
		return err
	}
	s.rep.BuildErrors, s.rep.BuildErrorSample = s.errs.snapshot()
	per := func(a, b string, n int, follower bool) StatePerEntry {
		h, r := s.growth(a, b, follower)
		return StatePerEntry{Heap: h / float64(n), RSS: r / float64(n)}
	}
	for _, follower := range []bool{false, true} {
		pe := StatePerEntryOf{Session: per("empty", "sessions", n, follower), Lock: per("sessions", "locks", s.opts.Locks, follower)}
		if s.opts.Waiters > 0 {
			pe.Waiter = per("locks", "waiters", s.opts.Waiters, follower)
		}
		if follower {
			s.rep.PerEntryFollower = pe
		} else {
			s.rep.PerEntryLeader = pe
		}
	}
	lead, err := s.ac.leader(ctx)
	if err != nil {
		return err
	}
	m, err := s.scrape(ctx, "http://"+lead.http)
	if err != nil {
		return err
	}
	s.rep.ServerSessions, s.rep.ServerLocks, s.rep.ServerWaiters = m[metricSessions], m["raftlock_locks_held"], m["raftlock_waiters"]
	if s.rep.ServerWaiters < float64(s.opts.Waiters) {
		return fmt.Errorf("bench: state: the leader counts %.0f waiters of %d queued", s.rep.ServerWaiters, s.opts.Waiters)
	}
	return nil
}

func (s *stateRun) buildFailed(what string) error {
	n, samples := s.errs.snapshot()
	return fmt.Errorf("bench: state: %s after trying for 10 minutes (%d errors: %s)", what, n, strings.Join(samples, "; "))
}

// queueWaiters queues session k on lock k+1 for k below Waiters. A waiting acquire holds its
// request open, and a process here may open 20,000 files, so they are queued in batches: each
// batch's requests wait at the leader until the leader counts them queued, then leadership is
// handed to another node and the requests are dropped. A wait that ends after a leader change
// keeps its queue entry (docs/api.md), so the entries stay in the state, as a client's whose
// node failed would; they are granted in order when the locks are released.
func (s *stateRun) queueWaiters(ctx context.Context) error {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableKeepAlives: true}}
	queued := 0
	for queued < s.opts.Waiters {
		lead, err := s.ac.leader(ctx)
		if err != nil {
			return err
		}
		before, err := s.scrape(ctx, "http://"+lead.http)
		if err != nil {
			return err
		}
		batch := min(s.opts.WaiterBatch, s.opts.Waiters-queued)
		bctx, cancel := context.WithCancel(ctx)
		var target atomic.Pointer[agentProc] // where the requests go: the leader, as last seen
		target.Store(lead)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16) // how many connect at once
		for k := queued; k < queued+batch; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A burst of waits can cost a loaded machine its leader; an acquire that failed
				// is sent again (a session already queued keeps its place) until the batch ends.
				for bctx.Err() == nil {
					if s.queueOne(bctx, hc, sem, target.Load(), k) {
						return
					}
					sleep(bctx, 500*time.Millisecond)
				}
			}()
		}
		want := before["raftlock_waiters"] + float64(batch)
		s.progress("queueing waiters: %d/%d", queued, s.opts.Waiters)
		deadline := time.Now().Add(10 * time.Minute)
		for {
			if l, err := s.ac.leader(ctx); err == nil {
				lead = l
				target.Store(l)
			}
			m, err := s.scrape(ctx, "http://"+lead.http)
			if err == nil && m["raftlock_waiters"] >= want {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				wg.Wait()
				n, samples := s.errs.snapshot()
				return fmt.Errorf("bench: state: the leader counts %.0f waiters of %.0f after 10 minutes (%d errors: %s)",
					m["raftlock_waiters"], want, n, strings.Join(samples, "; "))
			}
			if !sleep(ctx, 200*time.Millisecond) {
				cancel()
				wg.Wait()
				return ctx.Err()
			}
		}
		if err := s.transferLeadership(ctx, lead); err != nil {
			cancel()
			wg.Wait()
			return err
		}
		cancel()
		wg.Wait()
		queued += batch
	}
	hc.CloseIdleConnections()
	return nil
}

// queueOne sends session k's waiting acquire of lock k+1 to node p and holds it open until
// bctx ends. It reports false when the request failed before that (to be sent again).
func (s *stateRun) queueOne(bctx context.Context, hc *http.Client, sem chan struct{}, p *agentProc, k int) bool {
	sem <- struct{}{}
	released := make(chan struct{})
	go func() { // let the next one connect once this one is sent, or after 20 ms at most
		select {
		case <-released:
		case <-time.After(20 * time.Millisecond):
		}
		<-sem
	}()
	defer func() {
		select {
		case released <- struct{}{}:
		default:
		}
	}()
	body := fmt.Sprintf(`{"session":%q,"wait":"10m"}`, s.ids[k%len(s.ids)])
	req, err := http.NewRequestWithContext(bctx, http.MethodPost,
		"http://"+p.http+"/v1/locks/"+lockOf((k+1)%s.opts.Locks)+"/acquire", strings.NewReader(body))
	if err != nil {
		s.errs.add(err)
		return true
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if bctx.Err() != nil {
		return true // dropped on purpose, after the leader counted it queued
	}
	if err != nil {
		s.errs.add(fmt.Errorf("waiting acquire: %w", err))
		return false
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	if bctx.Err() != nil {
		return true
	}
	s.errs.add(fmt.Errorf("waiting acquire answered %s: %s", resp.Status, bytes.TrimSpace(b)))
	return false
}

// transferLeadership hands leadership from lead to another node and waits until one leads.
func (s *stateRun) transferLeadership(ctx context.Context, lead *agentProc) error {
	c, err := client.New([]string{"http://" + lead.http})
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Raw().TransferLeadership(ctx, ""); err != nil {
		return fmt.Errorf("bench: state: leadership transfer: %w", err)
	}
	s.rep.LeaderTransfers++
	for {
		l, err := s.ac.leader(ctx)
		if err != nil {
			return err
		}
		if l != lead {
			return nil
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// probeOp is one acquire+release of the probe.
type probeOp struct {
	start, end time.Time
}

// probe runs acquire+release on a lock of its own until ctx ends.
type probe struct {
	mu   sync.Mutex
	ops  []probeOp
	errs errorLog
}

func (p *probe) run(ctx context.Context, c *client.Client, lock string) {
	sess, err := c.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: "1h", Name: "state-probe"})
	if err != nil {
		p.errs.add(err)
		return
	}
	for ctx.Err() == nil {
		t0 := time.Now()
		res, err := c.Raw().Acquire(ctx, lock, api.AcquireRequest{Session: sess.ID})
		if err == nil {
			err = c.Raw().Release(ctx, lock, sess.ID, res.Token)
		}
		t1 := time.Now()
		if err != nil {
			if ctx.Err() == nil {
				p.errs.add(err)
			}
			continue
		}
		p.mu.Lock()
		p.ops = append(p.ops, probeOp{t0, t1})
		p.mu.Unlock()
	}
}

// count returns how many operations the probe finished.
func (p *probe) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ops)
}

// during returns the longest operation that overlapped [a, b] and how many did.
func (p *probe) during(a, b time.Time) (maxMs float64, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, op := range p.ops {
		if op.end.Before(a) || op.start.After(b) {
			continue
		}
		n++
		maxMs = max(maxMs, ms(op.end.Sub(op.start)))
	}
	return maxMs, n
}

// outside summarises the operations that overlapped none of the intervals.
func (p *probe) outside(iv [][2]time.Time) Latency {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ds []time.Duration
next:
	for _, op := range p.ops {
		for _, w := range iv {
			if !op.end.Before(w[0]) && !op.start.After(w[1]) {
				continue next
			}
		}
		ds = append(ds, op.end.Sub(op.start))
	}
	return summarize(ds)
}

// probeSnapshots runs the probe and background lock traffic until the leader has taken a Raft
// snapshot, then takes a backup through GET /v1/snapshot.
func (s *stateRun) probeSnapshots(ctx context.Context) error {
	c, lead, err := s.leaderClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	pctx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	p := &probe{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.run(pctx, c, "state-probe/probe") }()
	// Background traffic: 16 more clients on locks of their own, so that the log reaches the
	// snapshot threshold sooner.
	for i := range 16 {
		wg.Add(1)
		go func() { defer wg.Done(); (&probe{}).run(pctx, c, fmt.Sprintf("state-probe/load-%d", i)) }()
	}
	defer wg.Wait()
	m0, err := s.scrape(ctx, "http://"+lead.http)
	if err != nil {
		return err
	}
	var windows [][2]time.Time
	deadline := time.Now().Add(s.opts.ProbeTime)
	last, prev := m0, time.Now()
	for i := 0; ; i++ {
		if i%40 == 0 {
			s.progress("waiting for the leader's raft snapshot under lock traffic (%d probe ops)", p.count())
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
		now := time.Now()
		m, err := s.scrape(ctx, "http://"+lead.http)
		if err != nil {
			continue
		}
		if m["raftlock_snapshots_total"] > last["raftlock_snapshots_total"] {
			dur := m["raftlock_snapshot_duration_seconds_sum"] - last["raftlock_snapshot_duration_seconds_sum"]
			taken := int(m["raftlock_snapshots_total"] - last["raftlock_snapshots_total"])
			s.rep.RaftSnapshots += taken
			s.rep.RaftSnapshotSeconds = dur / float64(taken)
			s.rep.RaftSnapshotBytes = m["raftlock_snapshot_last_size_bytes"]
			windows = append(windows, [2]time.Time{prev.Add(-time.Duration(dur * float64(time.Second))), now})
			sleep(ctx, time.Second) // operations still running at its end finish
			mx, n := p.during(windows[0][0], windows[0][1])
			s.rep.ProbeMaxInSnapshotMs, s.rep.ProbeOpsInSnapshot = mx, n
			break
		}
		last, prev = m, now
		if now.After(deadline) {
			s.errs.add(fmt.Errorf("the leader took no raft snapshot within %s of lock traffic", s.opts.ProbeTime))
			break
		}
	}
	// The backup, from the leader, while the traffic goes on.
	f, err := os.Create(filepath.Join(s.dir, "state.snap"))
	if err != nil {
		return fmt.Errorf("bench: state: %w", err)
	}
	defer f.Close()
	t0 := time.Now()
	lc, err := client.New([]string{"http://" + lead.http})
	if err != nil {
		return err
	}
	defer lc.Close()
	if err := lc.Raw().SaveSnapshot(ctx, f); err != nil {
		return fmt.Errorf("bench: state: backup: %w", err)
	}
	t1 := time.Now()
	s.rep.BackupSeconds = t1.Sub(t0).Seconds()
	if st, err := f.Stat(); err == nil {
		s.rep.BackupBytes = st.Size()
	}
	windows = append(windows, [2]time.Time{t0, t1})
	sleep(ctx, time.Second)
	s.rep.ProbeMaxInBackupMs, s.rep.ProbeOpsInBackup = p.during(t0, t1)
	stopProbe()
	wg.Wait()
	s.rep.Probe = p.outside(windows)
	s.rep.ProbeErrors, s.rep.ProbeErrorSample = p.errs.snapshot()
	return nil
}

// catchUp starts a fourth node with an empty data directory and --join, times until it has
// applied the leader's log as it was when it started, then removes it.
func (s *stateRun) catchUp(ctx context.Context) error {
	lead, err := s.ac.leader(ctx)
	if err != nil {
		return err
	}
	cl, err := s.ac.cluster(ctx, lead, false)
	if err != nil {
		return err
	}
	target := cl.CommitIndex
	addrs, err := freeAddrs(2)
	if err != nil {
		return err
	}
	p := &agentProc{id: "n4", http: addrs[0], raft: addrs[1], dataDir: filepath.Join(s.dir, "n4"),
		log: filepath.Join(s.dir, "n4.log"), args: []string{"--join", "http://" + lead.http}}
	s.progress("a fresh node catches up to index %d", target)
	t0 := time.Now()
	if err := s.ac.start(p); err != nil {
		return err
	}
	defer func() {
		if p.cmd != nil {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	for {
		h, err := s.ac.health(cctx, p)
		if err == nil && h.AppliedIndex >= target {
			break
		}
		if isClosed(p.exited) {
			return fmt.Errorf("bench: state: the fresh node exited; see %s", p.log)
		}
		if !sleep(cctx, 50*time.Millisecond) {
			return fmt.Errorf("bench: state: the fresh node did not catch up: %w (log %s)", cctx.Err(), p.log)
		}
	}
	s.rep.CatchUpSeconds = time.Since(t0).Seconds()
	if m, err := s.scrape(ctx, "http://"+p.http); err == nil {
		s.rep.CatchUpSnapshots = m["raftlock_snapshots_total"]
	}
	// Out again: the cluster goes on with its three nodes.
	c, err := client.New(s.ac.endpoints())
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		_, err := c.Raw().RemoveMember(ctx, p.id)
		if err == nil {
			break
		}
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
			break
		}
		s.errs.add(fmt.Errorf("removing the fresh node: %w", err))
		if !sleep(cctx, time.Second) {
			return fmt.Errorf("bench: state: removing the fresh node: %w", err)
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
	return nil
}

// restart stops every node gracefully, then starts them all and times until they serve.
func (s *stateRun) restart(ctx context.Context) error {
	s.progress("stopping the three nodes")
	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(s.ac.nodes))
	for i, p := range s.ac.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.ac.stop(p) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.rep.StopSeconds = time.Since(t0).Seconds()
	s.progress("starting the three nodes from disk")
	t0 = time.Now()
	for _, p := range s.ac.nodes {
		if err := s.ac.start(p); err != nil {
			return err
		}
	}
	if err := s.ac.waitReady(ctx, s.ac.nodes); err != nil {
		return err
	}
	c, err := client.New(s.ac.endpoints())
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Raw().Acquire(ctx, "state-probe/after-start", api.AcquireRequest{TTL: "1h"}); err != nil {
		return fmt.Errorf("bench: state: acquire after the start: %w", err)
	}
	s.rep.StartSeconds = time.Since(t0).Seconds()
	for _, p := range s.ac.nodes {
		if v, err := peakRSS(p); err == nil {
			s.rep.StartPeakRSS = max(s.rep.StartPeakRSS, v)
		}
	}
	// What each node holds with nothing but the state (and, on the leader, its timers):
	// the queueing of the waiters over leader changes is gone from these figures.
	if err := s.memory(ctx, "restarted"); err != nil {
		return err
	}
	entries := float64(s.opts.Sessions + s.opts.Locks + s.opts.Waiters)
	for _, m := range s.rep.Memory {
		if m.Step != "restarted" {
			continue
		}
		for _, e := range s.rep.Memory {
			if e.Step == "empty" && e.Node == m.Node {
				if m.Leader {
					s.rep.RestartedLeaderHeapPerEntry = (m.Heap - e.Heap) / entries
				} else {
					s.rep.RestartedFollowerHeapPerEntry = (m.Heap - e.Heap) / entries
				}
			}
		}
	}
	return nil
}

// restore restores the backup into the cluster and records its time and the nodes' peak
// memory.
func (s *stateRun) restore(ctx context.Context) error {
	before := map[*agentProc]float64{}
	for _, p := range s.ac.nodes {
		if err := resetPeakRSS(p); err != nil {
			return fmt.Errorf("bench: state: reset peak RSS of %s: %w", p.id, err)
		}
		v, err := peakRSS(p)
		if err != nil {
			return err
		}
		before[p] = v
	}
	f, err := os.Open(filepath.Join(s.dir, "state.snap"))
	if err != nil {
		return err
	}
	defer f.Close()
	c, _, err := s.leaderClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	s.progress("restoring the backup")
	t0 := time.Now()
	res, err := c.Raw().RestoreSnapshot(ctx, f, client.RestoreOptions{})
	if err != nil {
		return fmt.Errorf("bench: state: restore: %w", err)
	}
	s.rep.RestoreSeconds = time.Since(t0).Seconds()
	s.rep.RestoredLocks = res.Locks
	for _, p := range s.ac.nodes {
		v, err := peakRSS(p)
		if err != nil {
			return err
		}
		s.rep.RestorePeakRSSAbs = max(s.rep.RestorePeakRSSAbs, v)
		s.rep.RestorePeakRSS = max(s.rep.RestorePeakRSS, v-before[p])
	}
	return nil
}
