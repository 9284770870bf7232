package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
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
	// ServerExpiries is the leader's raftlock_session_expiries_total increase over the run.
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
	// DestroySeconds is how long destroying the sessions took afterwards.
	DestroySeconds float64  `json:"destroy_seconds"`
	Errors         int64    `json:"errors"`
	ErrorSamples   []string `json:"error_samples,omitempty"`
}

// benchSession is one session kept alive by a worker.
type benchSession struct {
	id       string
	lastSent time.Time // send time of the last acknowledged renewal (or of the create)
	due      time.Time // when the next renewal should be sent
}

// sessionShared is what the workers of the sessions workload share.
type sessionShared struct {
	c         *client.Client
	ttl       time.Duration
	measuring atomic.Bool
	created   atomic.Int64
	renewals  atomic.Int64 // acknowledged in the window
	late      atomic.Int64
	lost      atomic.Int64
	missed    atomic.Int64
	errs      errorLog
}

// sessionWorker creates its share of the sessions and renews them in due order: renewals
// happen every TTL/3 for every session, so a FIFO queue stays sorted by due time.
type sessionWorker struct {
	sh                  *sessionShared
	toCreate            int
	queue               []*benchSession
	head                int
	createLat, renewLat []time.Duration
	maxDelay, maxGap    time.Duration
}

func (w *sessionWorker) push(s *benchSession) { w.queue = append(w.queue, s) }

func (w *sessionWorker) front() *benchSession {
	if w.head == len(w.queue) {
		return nil
	}
	return w.queue[w.head]
}

func (w *sessionWorker) pop() *benchSession {
	s := w.queue[w.head]
	w.queue[w.head] = nil
	w.head++
	if w.head > 1024 && w.head > len(w.queue)/2 {
		w.queue = append(w.queue[:0], w.queue[w.head:]...)
		w.head = 0
	}
	return s
}

func (w *sessionWorker) live() []*benchSession { return w.queue[w.head:] }

// run creates, then renews, until stop ends; created is marked done once creating is over.
func (w *sessionWorker) run(ctx, stop context.Context, created *sync.WaitGroup) {
	creating := true
	doneCreating := func() {
		if creating {
			creating = false
			created.Done()
		}
	}
	defer doneCreating()
	for stop.Err() == nil {
		now := time.Now()
		if f := w.front(); f != nil && !f.due.After(now) {
			w.renew(ctx, w.pop())
			continue
		}
		if w.toCreate > 0 {
			w.create(ctx)
			continue
		}
		doneCreating()
		next := now.Add(time.Second)
		if f := w.front(); f != nil {
			next = f.due
		}
		sleep(stop, next.Sub(now))
	}
}

func (w *sessionWorker) create(ctx context.Context) {
	sent := time.Now()
	info, err := w.sh.c.CreateSession(ctx, api.CreateSessionRequest{TTL: w.sh.ttl.String(), Name: "bench"})
	if err != nil {
		if ctx.Err() == nil {
			w.sh.errs.add(fmt.Errorf("create session: %w", err))
			sleep(ctx, 50*time.Millisecond)
		}
		return
	}
	w.createLat = append(w.createLat, time.Since(sent))
	w.toCreate--
	w.sh.created.Add(1)
	w.push(&benchSession{id: info.ID, lastSent: sent, due: sent.Add(w.sh.ttl / 3)})
}

func (w *sessionWorker) renew(ctx context.Context, s *benchSession) {
	ttl := w.sh.ttl
	sent := time.Now()
	w.maxDelay = max(w.maxDelay, sent.Sub(s.due))
	if sent.Sub(s.lastSent) > ttl/2 {
		w.sh.late.Add(1)
	}
	// After lastSent+TTL the server may have expired the session: an answer is useless.
	rctx, cancel := context.WithDeadline(ctx, s.lastSent.Add(ttl))
	_, err := w.sh.c.RenewSession(rctx, s.id)
	cancel()
	switch {
	case err == nil:
		w.maxGap = max(w.maxGap, sent.Sub(s.lastSent))
		s.lastSent, s.due = sent, sent.Add(ttl/3)
		if w.sh.measuring.Load() {
			w.renewLat = append(w.renewLat, time.Since(sent))
			w.sh.renewals.Add(1)
		}
		w.push(s)
	case ctx.Err() != nil:
		w.push(s) // the run was interrupted; keep it to destroy
	case errors.Is(err, client.ErrSessionNotFound):
		w.sh.lost.Add(1)
		w.sh.errs.add(fmt.Errorf("renew: %w", err))
	case time.Since(s.lastSent) >= ttl:
		w.sh.missed.Add(1)
		w.sh.errs.add(fmt.Errorf("renew: no acknowledgement within the TTL: %w", err))
		w.push(s) // the server may still know it; destroy it at the end
	default:
		w.sh.errs.add(fmt.Errorf("renew: %w", err))
		s.due = time.Now()
		w.push(s)
	}
}

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
	sh := &sessionShared{c: t.c, ttl: r.opts.SessionTTL}
	workers := make([]*sessionWorker, nw)
	for i := range workers {
		workers[i] = &sessionWorker{sh: sh, toCreate: n / nw}
		if i < n%nw {
			workers[i].toCreate++
		}
	}
	stopCtx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	var wg, creating sync.WaitGroup
	var phase atomic.Value // string: what the progress line says
	phase.Store("creating")
	start := time.Now()
	stopProgress := r.progress(func(now time.Time) string {
		return fmt.Sprintf("sessions: %s  created %d/%d  renewals %d  lost %d", phase.Load(),
			sh.created.Load(), n, sh.renewals.Load(), sh.lost.Load()+sh.missed.Load())
	})
	defer stopProgress()
	for _, w := range workers {
		wg.Add(1)
		creating.Add(1)
		go func() { defer wg.Done(); w.run(ctx, stopCtx, &creating) }()
	}
	creating.Wait()
	res.CreateSeconds = time.Since(start).Seconds()
	phase.Store("warming up")
	sleep(ctx, r.opts.Warmup)
	m0, err0 := scrapeMetrics(ctx, r.hc, t.leader)
	t0 := time.Now()
	sh.measuring.Store(true)
	phase.Store("measuring")
	sleep(ctx, r.opts.Duration)
	sh.measuring.Store(false)
	t1 := time.Now()
	m1, err1 := scrapeMetrics(ctx, r.hc, t.leader)
	stopWorkers()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("bench: sessions: %w", err)
	}
	phase.Store("destroying")
	res.DestroySeconds = destroySessions(ctx, t.c, workers, nw).Seconds()
	after, err2 := scrapeMetrics(ctx, r.hc, t.leader)
	if err := errors.Join(err0, err1, err2); err != nil {
		return res, err
	}
	res.fill(sh, workers, t1.Sub(t0))
	res.LeaderCPUSeconds = m1[metricCPU] - m0[metricCPU]
	res.LeaderCPUPercent = 100 * res.LeaderCPUSeconds / t1.Sub(t0).Seconds()
	res.LeaderRSSBytes = m1[metricRSS]
	res.ServerSessions = m1[metricSessions]
	res.ServerExpiries = after[metricExpiries] - before[metricExpiries]
	if m0["raftlock_raft_leader"] != 1 || m1["raftlock_raft_leader"] != 1 {
		res.Note += "; the leader changed during the run: its figures are not the leader's"
	}
	return res, nil
}

// fill gathers the workers' figures into res.
func (res *SessionsResult) fill(sh *sessionShared, workers []*sessionWorker, window time.Duration) {
	var createLat, renewLat []time.Duration
	var maxDelay, maxGap time.Duration
	for _, w := range workers {
		createLat = append(createLat, w.createLat...)
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

// destroySessions destroys every session the workers still keep, nw at a time.
func destroySessions(ctx context.Context, c *client.Client, workers []*sessionWorker, nw int) time.Duration {
	start := time.Now()
	ids := make(chan string, nw)
	var wg sync.WaitGroup
	for range nw {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				_, _ = c.DestroySession(ctx, id)
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
