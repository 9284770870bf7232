package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/client"
)

// SessionsResult holds the figures of the sessions workload.
type SessionsResult struct {
	Sessions int    `json:"sessions"`
	TTL      string `json:"ttl"`
	Workers  int    `json:"workers"`
	// Created sessions, how long creating them took and at what rate.
	Created       int     `json:"created"`
	CreateSeconds float64 `json:"create_seconds"`
	CreatesPerSec float64 `json:"creates_per_sec"`
	CreateLatency Latency `json:"create_latency"`
	// Renewals acknowledged in the window, their rate, the rate TTL/3 asks for, and latency.
	Renewals               int64   `json:"renewals"`
	RenewalsPerSec         float64 `json:"renewals_per_sec"`
	ExpectedRenewalsPerSec float64 `json:"expected_renewals_per_sec"`
	RenewLatency           Latency `json:"renew_latency"`
	// MaxRenewDelayMs is the longest a renewal was sent after it was due (TTL/3 after the
	// previous one); MaxGapMs the longest time between two acknowledged renewals' send times
	// of one session, which must stay below the TTL.
	MaxRenewDelayMs float64 `json:"max_renew_delay_ms"`
	MaxGapMs        float64 `json:"max_gap_ms"`
	// Late counts renewals sent more than TTL/2 after the previous one (a client in danger).
	Late int64 `json:"late"`
	// Lost counts sessions the server reported gone; DeadlineMissed those whose renewal was
	// not acknowledged before TTL after the previous one was sent. Both must be 0.
	Lost           int64 `json:"lost"`
	DeadlineMissed int64 `json:"deadline_missed"`
	// ServerExpiries is the leader's raftlock_session_expiries_total increase from the start to
	// the end of the measurement window (after it, the sessions not yet destroyed expire).
	ServerExpiries float64 `json:"server_expiries"`
	// ServerSessions is the leader's raftlock_sessions at the end of the window.
	ServerSessions float64 `json:"server_sessions"`
	// LeaderCPUSeconds is the leader process's CPU time over the window, LeaderCPUPercent the
	// same as a share of one core, LeaderRSSBytes its resident memory at the window's end.
	LeaderCPUSeconds float64 `json:"leader_cpu_seconds"`
	LeaderCPUPercent float64 `json:"leader_cpu_percent"`
	LeaderRSSBytes   float64 `json:"leader_rss_bytes"`
	// SharedProcess is set for an in-process cluster: every node and the bench itself are
	// one process, so the CPU and RSS figures are of all of them together.
	SharedProcess bool   `json:"shared_process"`
	Note          string `json:"note,omitempty"`
	// LiveAtFirstLoss is the number of live sessions when the first loss was detected (0: none
	// was), a rough upper bound of how many the cluster can keep alive: a loss is detected up
	// to a TTL after the server expired the session.
	LiveAtFirstLoss int64 `json:"live_at_first_loss,omitempty"`
	// GaveUp says why the workload stopped early: once more than 1% of the sessions are lost
	// the cluster is past what it can carry, and expiries only make it worse.
	GaveUp string `json:"gave_up,omitempty"`
	// DestroySeconds is how long destroying the sessions took afterwards.
	DestroySeconds float64  `json:"destroy_seconds"`
	Errors         int64    `json:"errors"`
	ErrorSamples   []string `json:"error_samples,omitempty"`
}

// sessionCreators is how many goroutines create sessions concurrently.
const sessionCreators = 32

func (r *runner) sessions(ctx context.Context) (SessionsResult, error) {
	n, nw := r.opts.Sessions, min(r.opts.SessionWorkers, r.opts.Sessions)
	res := SessionsResult{Sessions: n, TTL: r.opts.SessionTTL.String(), Workers: nw, SharedProcess: r.opts.Dev != nil}
	if res.SharedProcess {
		res.Note = "in-process cluster: all nodes and the bench share one process; CPU and RSS are the whole process"
	}
	t, err := r.connect(ctx)
	if err != nil {
		return res, err
	}
	defer t.c.Close()
	before, err := scrapeMetrics(ctx, r.hc, t.leader)
	if err != nil {
		return res, err
	}
	stopCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	sh := &sessionShared{c: t.c, ttl: r.opts.SessionTTL, maxLost: max(10, int64(n)/100), giveUp: stopWorkers}
	sh.toCreate.Store(int64(n))
	workers := make([]*sessionWorker, nw)
	for i := range workers {
		workers[i] = newSessionWorker(sh)
	}
	var phase atomic.Value // what the progress line says
	phase.Store("creating")
	stopProgress := r.progress(func(time.Time) string {
		return fmt.Sprintf("sessions: %s  created %d/%d  renewals %d  lost %d", phase.Load(),
			sh.created.Load(), n, sh.renewals.Load(), sh.lost.Load()+sh.missed.Load())
	})
	defer stopProgress()
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx, stopCtx) }()
	}
	start := time.Now()
	createLat := r.createSessions(stopCtx, sh, workers)
	res.CreateSeconds = time.Since(start).Seconds()
	phase.Store("warming up")
	sleep(stopCtx, r.opts.Warmup)
	m0, err0 := scrapeMetrics(ctx, r.hc, t.leader)
	t0 := time.Now()
	sh.measuring.Store(true)
	phase.Store("measuring")
	sleep(stopCtx, r.opts.Duration)
	sh.measuring.Store(false)
	t1 := time.Now()
	m1, err1 := scrapeMetrics(ctx, r.hc, t.leader)
	stopWorkers()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("bench: sessions: %w", err)
	}
	phase.Store("destroying")
	res.DestroySeconds = destroySessions(ctx, t.c, workers).Seconds()
	if err := errors.Join(err0, err1); err != nil {
		return res, err
	}
	res.fill(sh, workers, createLat, t1.Sub(t0))
	res.LeaderCPUSeconds = m1[metricCPU] - m0[metricCPU]
	res.LeaderCPUPercent = 100 * res.LeaderCPUSeconds / t1.Sub(t0).Seconds()
	if t1.Sub(t0) < r.opts.Duration/2 { // gave up before or early in the window
		res.RenewalsPerSec, res.LeaderCPUSeconds, res.LeaderCPUPercent = 0, 0, 0
	}
	res.LeaderRSSBytes = m1[metricRSS]
	res.ServerSessions = m1[metricSessions]
	// Up to the end of the window: once the workers stop, the sessions not yet destroyed
	// expire, as they should.
	res.ServerExpiries = m1[metricExpiries] - before[metricExpiries]
	if m0["raftlock_raft_leader"] != 1 || m1["raftlock_raft_leader"] != 1 {
		res.Note += "; the leader changed during the run: its figures are not the leader's"
	}
	res.LiveAtFirstLoss = sh.firstLoss.Load()
	if sh.gaveUp.Load() {
		res.GaveUp = fmt.Sprintf("gave up after %d lost sessions, with %d created in %.1fs: the cluster cannot keep this many alive",
			res.Lost+res.DeadlineMissed, res.Created, time.Since(start).Seconds())
	}
	return res, nil
}

// createSessions runs the creators until every session is created (or ctx ends) and returns
// the latencies of the creates.
func (r *runner) createSessions(ctx context.Context, sh *sessionShared, workers []*sessionWorker) []time.Duration {
	nc := min(sessionCreators, r.opts.Sessions)
	lats := make([][]time.Duration, nc)
	var wg sync.WaitGroup
	for i := range nc {
		wg.Add(1)
		go func() { defer wg.Done(); lats[i] = sh.create(ctx, workers, i) }()
	}
	wg.Wait()
	return slices.Concat(lats...)
}

// fill gathers the workers' figures into res.
func (res *SessionsResult) fill(sh *sessionShared, workers []*sessionWorker, createLat []time.Duration, window time.Duration) {
	var renewLat []time.Duration
	var maxDelay, maxGap time.Duration
	for _, w := range workers {
		renewLat = append(renewLat, w.renewLat...)
		maxDelay, maxGap = max(maxDelay, w.maxDelay), max(maxGap, w.maxGap)
	}
	res.Created = int(sh.created.Load())
	if res.CreateSeconds > 0 {
		res.CreatesPerSec = float64(res.Created) / res.CreateSeconds
	}
	res.CreateLatency, res.RenewLatency = summarize(createLat), summarize(renewLat)
	res.Renewals = sh.renewals.Load()
	res.RenewalsPerSec = float64(res.Renewals) / window.Seconds()
	ttl, _ := time.ParseDuration(res.TTL)
	res.ExpectedRenewalsPerSec = float64(res.Created) / (ttl / 3).Seconds()
	res.MaxRenewDelayMs, res.MaxGapMs = ms(maxDelay), ms(maxGap)
	res.Late, res.Lost, res.DeadlineMissed = sh.late.Load(), sh.lost.Load(), sh.missed.Load()
	res.Errors, res.ErrorSamples = sh.errs.snapshot()
}

// sessionDestroyers is how many goroutines destroy the sessions after the run.
const sessionDestroyers = 64

// destroySessions destroys every session the workers still keep.
func destroySessions(ctx context.Context, c *client.Client, workers []*sessionWorker) time.Duration {
	start := time.Now()
	ids := make(chan string, sessionDestroyers)
	var wg sync.WaitGroup
	for range sessionDestroyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				_, _ = c.Raw().DestroySession(ctx, id)
			}
		}()
	}
	for _, w := range workers {
		for _, s := range w.live() {
			ids <- s.id
		}
	}
	close(ids)
	wg.Wait()
	return time.Since(start)
}
