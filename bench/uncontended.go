package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// workerSessionTTL is the TTL of the sessions of the lock workloads' clients.
const workerSessionTTL = 10 * time.Second

// UncontendedResult holds the figures of one uncontended run.
type UncontendedResult struct {
	// Clients is the number of concurrent clients, each looping on its own lock.
	Clients int `json:"clients"`
	// Ops is the number of acquire+release pairs started in the window.
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"`
	// Acquire and Release are the latencies of the two requests of each pair.
	Acquire Latency `json:"acquire"`
	Release Latency `json:"release"`
	// Errors counts failed requests (the client retried them first); ErrorSamples shows some.
	Errors       int64    `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// Violations lists grants whose token did not exceed the previous grant of the same lock.
	Violations []string `json:"violations,omitempty"`
	// ServerCPUMicros is the CPU time all server processes spent in the window per acquire+release pair, in
	// microseconds (with an in-process cluster, the bench's own included); nil if unknown.
	ServerCPUMicros *float64 `json:"server_cpu_us_per_op,omitempty"`
	// StealPercent is the CPU time the hypervisor gave to other guests while this ran.
	StealPercent *float64 `json:"steal_percent,omitempty"`
}

// uncontendedWorker is what one client of the uncontended workload measured.
type uncontendedWorker struct {
	acquire, release []time.Duration
	violations       []string
}

func (r *runner) uncontended(ctx context.Context, clients int) (UncontendedResult, error) {
	res := UncontendedResult{Clients: clients}
	lock := func(i int) string { return r.lockName("u"+strconv.Itoa(clients), strconv.Itoa(i)) }
	// Each client stops at the window's end by itself; its last release completes on ctx.
	workers, w, cpu, errs, err := runClients(ctx, r, "uncontended", "ops", clients, lock,
		func(ctx, _ context.Context, l clientLoop) uncontendedWorker {
			return acquireReleaseLoop(ctx, l.c, l.session, l.name, l.w, l.count, l.errs)
		})
	if err != nil {
		return res, err
	}
	var acq, rel []time.Duration
	for _, wk := range workers {
		acq = append(acq, wk.acquire...)
		rel = append(rel, wk.release...)
		res.Violations = append(res.Violations, wk.violations...)
	}
	res.Ops = int64(len(acq))
	res.OpsPerSec = float64(res.Ops) / w.seconds()
	res.Acquire, res.Release = summarize(acq), summarize(rel)
	res.ServerCPUMicros = cpu.perOp(res.Ops)
	res.Errors, res.ErrorSamples = errs.snapshot()
	return res, nil
}

// acquireReleaseLoop acquires and releases one lock until the window ends, timing each request.
func acquireReleaseLoop(ctx context.Context, c *client.Client, session, name string, w window,
	ops *atomic.Int64, errs *errorLog) uncontendedWorker {
	var out uncontendedWorker
	var last uint64
	mayHold := false // a release failed: the next acquire may return the same token
	for {
		t0 := time.Now()
		if w.over(t0) || ctx.Err() != nil {
			return out
		}
		resp, err := c.Raw().Acquire(ctx, name, api.AcquireRequest{Session: session})
		t1 := time.Now()
		if err != nil {
			if !isCancel(ctx, err) {
				errs.add(fmt.Errorf("acquire: %w", err))
				sleep(ctx, 10*time.Millisecond)
			}
			continue
		}
		if resp.Token < last || (resp.Token == last && !mayHold) {
			out.violations = append(out.violations, fmt.Sprintf("lock %s: token %d after %d", name, resp.Token, last))
		}
		last = resp.Token
		err = c.Raw().Release(ctx, name, session, resp.Token)
		t2 := time.Now()
		mayHold = err != nil
		if err != nil {
			if !isCancel(ctx, err) {
				errs.add(fmt.Errorf("release: %w", err))
			}
			continue
		}
		if w.measuring(t0) {
			out.acquire = append(out.acquire, t1.Sub(t0))
			out.release = append(out.release, t2.Sub(t1))
			ops.Add(1)
		}
	}
}

// connectSessions connects to the cluster and opens n sessions; done closes them and the client.
func (r *runner) connectSessions(ctx context.Context, n int) (*target, []*client.Session, func(), error) {
	t, err := r.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	sessions, err := openSessions(ctx, t.c, n)
	done := func() {
		closeSessions(sessions)
		t.c.Close()
	}
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return t, sessions, done, nil
}

// openSessions creates n kept-alive sessions, a few at a time.
func openSessions(ctx context.Context, c *client.Client, n int) ([]*client.Session, error) {
	out := make([]*client.Session, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = c.NewSession(ctx, client.WithTTL(workerSessionTTL), client.WithSessionName("bench"))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return out, fmt.Errorf("bench: %w", err)
		}
	}
	return out, nil
}

// closeSessions destroys the sessions (which releases their locks), a few at a time.
func closeSessions(sessions []*client.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, s := range sessions {
		if s == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			_ = s.Close(ctx)
		}()
	}
	wg.Wait()
}
