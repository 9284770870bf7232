package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// SemaphoreResult holds the figures of one semaphore run: C clients on one semaphore of
// Limit, each asking for a permit (a long poll) and giving it back as soon as it is granted.
type SemaphoreResult struct {
	Clients      int     `json:"clients"`
	Limit        int     `json:"limit"`
	Grants       int64   `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	// Wait is the time from the acquire being sent until its grant arrived.
	Wait Latency `json:"wait"`
	// MostHolders is the most clients that held a permit at once.
	MostHolders int `json:"most_holders"`
	// Overflows counts grants received while Limit other clients held a permit, and
	// DuplicateTokens grants under a token granted before. Both must be 0.
	Overflows       int `json:"overflows"`
	DuplicateTokens int `json:"duplicate_tokens"`
	// Outcome has the violations, errors and servers' CPU per grant (acquire and release).
	Outcome
}

// RWResult holds the figures of one read/write-lock run: C clients on one read/write lock,
// Writers of them taking it exclusively and the others shared, each giving it back as soon as
// it is granted.
type RWResult struct {
	Clients      int     `json:"clients"`
	Writers      int     `json:"writers"`
	Reads        int64   `json:"reads"`
	Writes       int64   `json:"writes"`
	ReadsPerSec  float64 `json:"reads_per_sec"`
	WritesPerSec float64 `json:"writes_per_sec"`
	// ReadWait and WriteWait are the times from an acquire being sent until its grant arrived.
	ReadWait  Latency `json:"read_wait"`
	WriteWait Latency `json:"write_wait"`
	// MostReaders is the most readers that held the lock at once.
	MostReaders int `json:"most_readers"`
	// Overlaps counts exclusive grants received while another client held the lock, and
	// shared ones while a writer did; DuplicateTokens grants under a token granted before.
	// Both must be 0.
	Overlaps        int `json:"overlaps"`
	DuplicateTokens int `json:"duplicate_tokens"`
	// Outcome has the violations, errors and servers' CPU per grant (acquire and release).
	Outcome
}

// kindMonitor checks, as grants arrive, that a semaphore never has more than its limit of
// holders, that an exclusive holder of a read/write lock is alone, and that no token is granted
// twice. As the contended workload's monitor, it sees each hold from the grant's arrival to
// just before the release is sent, which the server's hold contains.
type kindMonitor struct {
	mu         sync.Mutex
	limit      int // a semaphore's; 0 for a read/write lock
	holders    int
	writer     bool
	most       int
	bad, dups  int
	tokens     map[uint64]bool
	violations []string
}

func newKindMonitor(limit int) *kindMonitor {
	return &kindMonitor{limit: limit, tokens: map[uint64]bool{}}
}

func (m *kindMonitor) grant(client int, token uint64, exclusive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tokens[token] {
		m.dups++
		m.note(fmt.Sprintf("DUPLICATE TOKEN: client %d granted token %d, granted before", client, token))
	}
	m.tokens[token] = true
	switch {
	case m.limit > 0 && m.holders >= m.limit:
		m.bad++
		m.note(fmt.Sprintf("OVER THE LIMIT: client %d granted token %d while %d of %d permits were held", client, token, m.holders, m.limit))
	case m.limit == 0 && (m.writer || exclusive && m.holders > 0):
		m.bad++
		m.note(fmt.Sprintf("OVERLAP: client %d granted token %d (exclusive %v) beside %d holders (a writer among them: %v)",
			client, token, exclusive, m.holders, m.writer))
	}
	m.holders++
	m.writer = m.writer || exclusive
	if !exclusive {
		m.most = max(m.most, m.holders)
	}
}

func (m *kindMonitor) release(exclusive bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.holders--
	if exclusive {
		m.writer = false
	}
}

func (m *kindMonitor) note(v string) {
	if len(m.violations) < maxViolations {
		m.violations = append(m.violations, v)
	}
}

// kindLoop is one client's loop: acquire (a long poll) with req's limit and mode, release at
// once, until actx ends. It returns the waits of the grants inside the window.
func kindLoop(ctx, actx context.Context, l clientLoop, req api.AcquireRequest, mon *kindMonitor) []time.Duration {
	req.Session, req.Wait = l.session, contendedWait
	exclusive := req.Mode != api.ModeShared
	var waits []time.Duration
	for actx.Err() == nil {
		asked := time.Now()
		resp, err := l.c.Raw().Acquire(actx, l.name, req)
		granted := time.Now()
		if err != nil {
			if l.acquireFailed(actx, err) {
				break
			}
			continue
		}
		mon.grant(l.idx, resp.Token, exclusive && req.Limit == nil)
		if l.w.measuring(granted) {
			l.count.Add(1)
			waits = append(waits, granted.Sub(asked))
		}
		mon.release(exclusive && req.Limit == nil)
		if !l.release(ctx, resp.Token) {
			break
		}
	}
	return waits
}

// semaphoreLimit is the limit of the semaphore workload for clients: Options.SemaphoreLimit,
// or a quarter of the clients, at least 2.
func (r *runner) semaphoreLimit(clients int) int {
	if r.opts.SemaphoreLimit > 0 {
		return r.opts.SemaphoreLimit
	}
	return max(2, clients/4)
}

func (r *runner) semaphore(ctx context.Context, clients int) (SemaphoreResult, error) {
	res := SemaphoreResult{Clients: clients, Limit: r.semaphoreLimit(clients)}
	limit := res.Limit
	waits, cpu, mon, errs, err := r.runKind(ctx, "semaphore", clients, func(int) api.AcquireRequest {
		return api.AcquireRequest{Limit: &limit}
	})
	if err != nil {
		return res, err
	}
	all := slices.Concat(waits...)
	res.Grants = int64(len(all))
	res.GrantsPerSec = float64(res.Grants) / r.opts.Duration.Seconds()
	res.Wait = summarize(all)
	res.ServerCPUMicros = cpu.perOp(res.Grants)
	res.MostHolders, res.Overflows, res.DuplicateTokens, res.Violations = mon.most, mon.bad, mon.dups, mon.violations
	res.Errors, res.ErrorSamples = errs.snapshot()
	return res, nil
}

// rwWriters is how many of the read/write workload's clients write: an eighth, at least one.
func rwWriters(clients int) int { return max(1, clients/8) }

func (r *runner) rwlock(ctx context.Context, clients int) (RWResult, error) {
	res := RWResult{Clients: clients, Writers: rwWriters(clients)}
	waits, cpu, mon, errs, err := r.runKind(ctx, "rwlock", clients, func(i int) api.AcquireRequest {
		if i < res.Writers {
			return api.AcquireRequest{}
		}
		return api.AcquireRequest{Mode: api.ModeShared}
	})
	if err != nil {
		return res, err
	}
	writes, reads := slices.Concat(waits[:res.Writers]...), slices.Concat(waits[res.Writers:]...)
	res.Writes, res.Reads = int64(len(writes)), int64(len(reads))
	secs := r.opts.Duration.Seconds()
	res.WritesPerSec, res.ReadsPerSec = float64(res.Writes)/secs, float64(res.Reads)/secs
	res.WriteWait, res.ReadWait = summarize(writes), summarize(reads)
	res.ServerCPUMicros = cpu.perOp(res.Reads + res.Writes)
	res.MostReaders, res.Overlaps, res.DuplicateTokens, res.Violations = mon.most, mon.bad, mon.dups, mon.violations
	res.Errors, res.ErrorSamples = errs.snapshot()
	return res, nil
}

// runKind runs clients on one lock, each asking with its request, for the warm-up and the
// window, and returns each client's waits of the grants inside the window.
func (r *runner) runKind(ctx context.Context, kind string, clients int, request func(i int) api.AcquireRequest) (
	[][]time.Duration, *cpuMeter, *kindMonitor, *errorLog, error) {
	mon := newKindMonitor(0)
	if first := request(clients - 1); first.Limit != nil {
		mon = newKindMonitor(*first.Limit)
	}
	name := r.lockName(kind + strconv.Itoa(clients))
	lock := func(int) string { return name }
	waits, _, cpu, errs, err := runClients(ctx, r, kind, "grants", clients, lock, func(ctx, actx context.Context, l clientLoop) []time.Duration {
		return kindLoop(ctx, actx, l, request(l.idx), mon)
	})
	return waits, cpu, mon, errs, err
}
