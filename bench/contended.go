package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// contendedWait is the wait of each long-poll acquire: longer than any run, so that a waiter
// never drops out of the queue (and loses its place) while the workload runs.
const contendedWait = "10m"

// ContendedResult holds the figures of one contended run.
type ContendedResult struct {
	// Clients is the number of clients competing for the one lock.
	Clients int `json:"clients"`
	// Grants is the number of grants received in the window.
	Grants       int64   `json:"grants"`
	GrantsPerSec float64 `json:"grants_per_sec"`
	// Handoff is the time from the release being acknowledged to its holder until the next
	// holder receives its grant. The server grants the first waiter in the release's own
	// command, so the grant often arrives first: such handoffs count as 0 and are counted in
	// GrantsBeforeAck.
	Handoff         Latency `json:"handoff"`
	GrantsBeforeAck int     `json:"grants_before_release_ack"`
	// HandoffFromSend is the time from the release being sent until the next grant arrives.
	HandoffFromSend Latency `json:"handoff_from_release_sent"`
	// MinGrants and MaxGrants are the fewest and most grants of one client in the window;
	// Fairness is their ratio (0 when some client got none).
	MinGrants int64   `json:"min_grants_per_client"`
	MaxGrants int64   `json:"max_grants_per_client"`
	Fairness  float64 `json:"fairness_max_over_min"`
	// FIFOInversions counts grants to a client that asked more than fifoSlack after another
	// client that was still waiting (and was granted later). Clients cannot see the order in
	// which the server queued them, only when they wrote their requests to their connections,
	// so a rare inversion can come from scheduling; a steady count means the queue is not FIFO.
	FIFOInversions int `json:"fifo_inversions"`
	// Overlaps counts grants received while another client still held the lock, and
	// TokenRegressions grants whose token did not exceed the previous grant's. Both must be 0.
	Overlaps         int `json:"overlaps"`
	TokenRegressions int `json:"token_regressions"`
	// Outcome has the violations, errors and servers' CPU per grant (acquire and release).
	Outcome
}

// Outcome ends the result of a workload that checks what it was granted: the violations it
// saw, its errors, and what the servers spent.
type Outcome struct {
	// Violations describe grants that broke the workload's rule (a lock or limit overrun, a
	// token granted twice or out of order); there must be none.
	Violations   []string `json:"violations,omitempty"`
	Errors       int64    `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// ServerCPUMicros is the CPU time all server processes spent in the window per operation,
	// in microseconds (with an in-process cluster, the bench's own included); nil if unknown.
	ServerCPUMicros *float64 `json:"server_cpu_us_per_op,omitempty"`
	// StealPercent is the CPU time the hypervisor gave to other guests while this ran.
	StealPercent *float64 `json:"steal_percent,omitempty"`
}

// hold is one grant of the contended lock as its client saw it.
type hold struct {
	client       int
	token        uint64
	asked        time.Time // the acquire that was granted was written to its connection
	granted      time.Time // the grant arrived
	releaseSent  time.Time // just before the release was sent
	releaseAcked time.Time // the release was acknowledged
}

// monitor checks, as grants arrive, that no two holds overlap and that tokens only grow. A
// client calls grant when the answer reaches it and release just before it sends the release:
// the server's hold contains that interval, so an overlap seen here is a real double grant.
type monitor struct {
	mu               sync.Mutex
	holder           int // client holding the lock, or -1
	holderToken      uint64
	last             uint64
	overlaps         int
	tokenRegressions int
	violations       []string
}

const maxViolations = 20

func newMonitor() *monitor { return &monitor{holder: -1} }

func (m *monitor) grant(client int, token uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder >= 0 {
		m.overlaps++
		m.note(fmt.Sprintf("OVERLAP: client %d granted token %d while client %d holds token %d",
			client, token, m.holder, m.holderToken))
	}
	if token <= m.last {
		m.tokenRegressions++
		m.note(fmt.Sprintf("TOKEN REGRESSION: client %d granted token %d after token %d", client, token, m.last))
	}
	m.holder, m.holderToken, m.last = client, token, max(m.last, token)
}

func (m *monitor) release(client int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.holder == client {
		m.holder = -1
	}
}

func (m *monitor) note(v string) {
	if len(m.violations) < maxViolations {
		m.violations = append(m.violations, v)
	}
}

func (r *runner) contended(ctx context.Context, clients int) (ContendedResult, error) {
	res := ContendedResult{Clients: clients}
	mon := newMonitor()
	name := r.lockName("c" + strconv.Itoa(clients))
	lock := func(int) string { return name }
	holds, w, cpu, errs, err := runClients(ctx, r, "contended", "grants", clients, lock, func(ctx, actx context.Context, l clientLoop) []hold {
		return contendedLoop(ctx, actx, l, mon)
	})
	if err != nil {
		return res, err
	}
	res.analyze(slices.Concat(holds...), w)
	res.ServerCPUMicros = cpu.perOp(res.Grants)
	mon.mu.Lock()
	res.Overlaps, res.TokenRegressions, res.Violations = mon.overlaps, mon.tokenRegressions, mon.violations
	mon.mu.Unlock()
	res.Errors, res.ErrorSamples = errs.snapshot()
	return res, nil
}

// contendedLoop takes the lock (waiting in its queue), releases it at once, and asks again,
// until actx ends. It returns the holds it completed.
func contendedLoop(ctx, actx context.Context, l clientLoop, mon *monitor) []hold {
	var holds []hold
	for actx.Err() == nil {
		asked, wrote := time.Now(), new(atomic.Int64)
		resp, err := l.c.Raw().Acquire(traceWrite(actx, wrote), l.name, api.AcquireRequest{Session: l.session, Wait: contendedWait})
		granted := time.Now()
		if err != nil {
			if l.acquireFailed(actx, err) {
				break
			}
			continue
		}
		mon.grant(l.idx, resp.Token)
		if l.w.measuring(granted) {
			l.count.Add(1)
		}
		sent := time.Now()
		mon.release(l.idx)
		if !l.release(ctx, resp.Token) {
			break
		}
		if t := wrote.Load(); t != 0 {
			asked = time.Unix(0, t)
		}
		holds = append(holds, hold{client: l.idx, token: resp.Token, asked: asked, granted: granted,
			releaseSent: sent, releaseAcked: time.Now()})
	}
	return holds
}

// clientLoop is what one client of a workload that runClients runs works with.
type clientLoop struct {
	c       *client.Client
	session string
	name    string // the client's lock
	idx     int    // the client's number
	w       window
	count   *atomic.Int64 // what the progress line counts (grants or ops in the window), of all the clients
	errs    *errorLog
}

// acquireFailed logs err, an acquire's failure, unless it only says the lock is held, and
// reports whether the loop is over (actx ended). After an error it waits a little, so that a
// failing cluster is not hammered.
func (l clientLoop) acquireFailed(actx context.Context, err error) bool {
	if actx.Err() != nil {
		return true
	}
	if !errors.Is(err, client.ErrLockHeld) {
		l.errs.add(fmt.Errorf("acquire: %w", err))
		sleep(actx, 10*time.Millisecond)
	}
	return false
}

// release gives back the grant of token and reports whether it did. Release retries unknown
// outcomes itself; a failure here leaves the lock with this session until it is closed, so
// the client stops competing.
func (l clientLoop) release(ctx context.Context, token uint64) bool {
	if err := l.c.Raw().Release(ctx, l.name, l.session, token); err != nil {
		l.errs.add(fmt.Errorf("release: %w", err))
		return false
	}
	return true
}

// runClients runs loop for each of clients clients, each on a session of its own and on the
// lock that lock names for it, through the warm-up and the window (actx ends with it), with
// progress shown under kind, counting unit. It returns each client's result, the window, the
// CPU meter of the window and the errors the clients logged.
func runClients[T any](ctx context.Context, r *runner, kind, unit string, clients int, lock func(i int) string,
	loop func(ctx, actx context.Context, l clientLoop) T) ([]T, window, *cpuMeter, *errorLog, error) {
	t, sessions, done, err := r.connectSessions(ctx, clients)
	if err != nil {
		return nil, window{}, nil, nil, err
	}
	defer done()
	var (
		count   atomic.Int64
		errs    errorLog
		wg      sync.WaitGroup
		results = make([]T, clients)
		w       = newWindow(r.opts.Warmup, r.opts.Duration)
	)
	// Acquires stop at the window's end; releases (on ctx) complete.
	actx, cancel := context.WithDeadline(ctx, w.end)
	defer cancel()
	cpu := r.meterCPU(ctx, t, w)
	label := fmt.Sprintf("%s C=%d", kind, clients)
	stop := r.progress(func(now time.Time) string { return windowStatus(label, w, now, count.Load(), unit) })
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = loop(ctx, actx, clientLoop{c: t.c, session: sessions[i].ID(), name: lock(i), idx: i, w: w,
				count: &count, errs: &errs})
		}()
	}
	wg.Wait()
	stop()
	if err := ctx.Err(); err != nil {
		return nil, w, nil, nil, fmt.Errorf("bench: %s: %w", kind, err)
	}
	return results, w, cpu, &errs, nil
}

// analyze computes the throughput, handoff, fairness and FIFO figures from the holds.
func (res *ContendedResult) analyze(holds []hold, w window) {
	slices.SortFunc(holds, func(a, b hold) int {
		switch {
		case a.token < b.token:
			return -1
		case a.token > b.token:
			return 1
		}
		return 0
	})
	perClient := make([]int64, res.Clients)
	var fromAck, fromSend []time.Duration
	for i, h := range holds {
		if !w.measuring(h.granted) {
			continue
		}
		res.Grants++
		perClient[h.client]++
		if i == 0 {
			continue
		}
		prev := holds[i-1]
		d := h.granted.Sub(prev.releaseAcked)
		if d < 0 {
			res.GrantsBeforeAck++
			d = 0
		}
		fromAck = append(fromAck, d)
		fromSend = append(fromSend, max(h.granted.Sub(prev.releaseSent), 0))
	}
	res.GrantsPerSec = float64(res.Grants) / w.seconds()
	res.Handoff, res.HandoffFromSend = summarize(fromAck), summarize(fromSend)
	if len(perClient) > 0 {
		res.MinGrants, res.MaxGrants = slices.Min(perClient), slices.Max(perClient)
		if res.MinGrants > 0 {
			res.Fairness = float64(res.MaxGrants) / float64(res.MinGrants)
		}
	}
	res.FIFOInversions = fifoInversions(holds, fifoSlack)
}

// traceWrite returns a context whose HTTP request records, in wrote, when the transport first
// wrote it out to its connection (Unix nanoseconds). The time before the call would also
// include the hand-over to the transport's goroutine, which on a loaded machine reorders the
// clients' requests by more than the network does.
func traceWrite(ctx context.Context, wrote *atomic.Int64) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.CompareAndSwap(0, time.Now().UnixNano()) },
	})
}

// fifoSlack is how much later a client must have asked than a waiting one for its earlier
// grant to count as a FIFO inversion: more than the jitter between sending a request and the
// server queueing it.
const fifoSlack = 5 * time.Millisecond

// fifoInversions counts, in holds sorted by token, the grants to a client that asked more
// than slack after some client that was granted later.
func fifoInversions(holds []hold, slack time.Duration) int {
	n := 0
	var earliest time.Time // earliest ask among the holds granted after the current one
	for i := len(holds) - 1; i >= 0; i-- {
		h := holds[i]
		if !earliest.IsZero() && h.asked.Sub(earliest) > slack {
			n++
		}
		if earliest.IsZero() || h.asked.Before(earliest) {
			earliest = h.asked
		}
	}
	return n
}
