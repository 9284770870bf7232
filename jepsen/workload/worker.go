package workload

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/jepsen/history"
	"github.com/raftlock/raftlock/jepsen/proxy"
)

// FaultClientPause is the fault name of a client pause in the history.
const FaultClientPause = "client-pause"

// Config shapes the workload.
type Config struct {
	// Workers is the number of concurrent clients, each with its own session.
	Workers int
	// Locks are the lock names the workers contend for.
	Locks []string
	// TTL is the session TTL (2–3 s in jepsen runs).
	TTL time.Duration
	// LockDelay is the lock-delay of the sessions of odd-numbered workers (the others have none).
	LockDelay time.Duration
	// OpTimeout bounds each request that does not wait.
	OpTimeout time.Duration
	// MaxWait is the longest wait of a blocking acquire; some acquires do not wait at all.
	MaxWait time.Duration
	// MaxHold is the longest a worker holds a lock (between write and release).
	MaxHold time.Duration
	// ReadRatio is the probability a holder reads the lock before writing.
	ReadRatio float64
	// BlockingReadRatio is the probability that a raw worker, before taking a lock, watches
	// one with a blocking read (?index=&wait=) from the last modify_index it read, for up to
	// MaxWait.
	BlockingReadRatio float64
	// CrashRatio is the probability that a worker crashes as it is granted a lock: it drops
	// its session, without releasing the lock or destroying the session, which then expires.
	CrashRatio float64
	// ClientWorkers is how many of the Workers hold locks through the Go client (see
	// ClientWorker) instead of raw HTTP requests; an observer per lock then follows its
	// holders through client.Client.Observe.
	ClientWorkers int
	// Cyclers is how many of the ClientWorkers are cyclers: each keeps one session for as long
	// as it lives and does fast Lock/Unlock cycles on it, in bursts on one lock at a time (see
	// ClientWorker.cycle).
	Cyclers int
	// Watchers is the number of prefix watchers of every lock of the run (see Workload.watch).
	Watchers int
	// DropWatchChanges makes the watchers leave every seventh change they receive out of the
	// history, as a watcher that misses changes would (a self-test the watch checker must flag).
	DropWatchChanges bool
	// IgnoreStreamEnd makes the streamed watchers take no notice of their stream's end (a
	// node cut off from its leader ends its streams): each stays silent from then on, as a
	// watcher that kept a stale stream would (a self-test the watch checker must flag).
	IgnoreStreamEnd bool
	// IgnoreDone makes the client workers ignore the end of their holds' contexts: they go on
	// believing they hold a lock after their session is gone (a self-test the belief checker
	// must flag).
	IgnoreDone bool
	// Seed makes each worker's choices reproducible.
	Seed int64
	// TLS, if set, makes every request HTTPS, trusting this configuration's CAs.
	TLS *tls.Config
	// ProxyTLS is the server configuration of the client workers' proxies when TLS is set: a
	// certificate the clients trust, since the proxies see each request (see netCut).
	ProxyTLS *tls.Config
	// Tokens are the ACL token secrets by process (worker, probe, observer); a process without
	// one sends no token.
	Tokens map[int]string
	// SemaphoreWorkers hold SemaphoreLock, a semaphore of SemaphoreLimit, and RWWorkers hold
	// RWLock, a read/write lock, through the Go client (see KindWorker).
	SemaphoreWorkers, SemaphoreLimit, RWWorkers int
	// WriterWait is how long a read/write lock's writer waits for the lock: the bound within
	// which no writer may starve.
	WriterWait time.Duration
	// StaleRatio is the probability that a semaphore or read/write-lock holder pauses past the
	// end of its hold and then uses the resource under its old token.
	StaleRatio float64
}

// kindWorkers is how many semaphore and read/write-lock workers there are.
func (c Config) kindWorkers() int { return c.SemaphoreWorkers + c.RWWorkers }

// kindProcess is the process id of semaphore or read/write-lock worker k, after the watchers.
func kindProcess(c Config, k int) int { return watcherProcess(c, c.Watchers) + k }

// Processes are the process ids of the workload's ops: the workers, then a liveness probe and
// an observer per lock, then the lock-table sampler, then the watchers, then the semaphore and
// read/write-lock workers. A secure run gives each its own token.
func (c Config) Processes() []int {
	var out []int
	for i := range c.Workers {
		out = append(out, i)
	}
	for i := range c.Locks {
		out = append(out, probeProcess(c, i), observerProcess(c, i))
	}
	out = append(out, samplerProcess(c))
	for i := range c.Watchers {
		out = append(out, watcherProcess(c, i))
	}
	for k := range c.kindWorkers() {
		out = append(out, kindProcess(c, k))
	}
	return out
}

func renewerProcess(c Config, worker int) int { return c.Workers + worker }
func probeProcess(c Config, lock int) int     { return 2*c.Workers + lock }
func observerProcess(c Config, lock int) int  { return 3*c.Workers + lock }
func samplerProcess(c Config) int             { return 4*c.Workers + len(c.Locks) }
func watcherProcess(c Config, i int) int      { return samplerProcess(c) + 1 + i }

// token is the token of process: a worker's renewals use the worker's own, since a session
// may be renewed only by the token that made it.
func (c Config) token(process int) string {
	if process >= c.Workers && process < 2*c.Workers {
		process -= c.Workers
	}
	return c.Tokens[process]
}

// scheme is the URL scheme of the nodes' API.
func (c Config) scheme() string {
	if c.TLS != nil {
		return "https"
	}
	return "http"
}

// clientOptions are the Go client's options for process: TLS and its token.
func (c Config) clientOptions(process int, opts ...client.Option) []client.Option {
	if c.TLS != nil {
		opts = append(opts, client.WithTLSConfig(c.TLS))
	}
	if tok := c.token(process); tok != "" {
		opts = append(opts, client.WithToken(tok))
	}
	return opts
}

// Workload is the set of workers, the resource they write to and the client pauses they obey.
type Workload struct {
	cfg    Config
	rec    *history.Recorder
	c      *Client
	res    *Resource
	kinds  *KindResource // the semaphore's and read/write lock's resource
	pauses chan time.Duration
	// crashes counts the workers that crashed holding a lock (see Config.CrashRatio).
	crashes atomic.Int64
	// cuts counts the client workers cut off from the cluster as they were granted a lock.
	cuts atomic.Int64

	mu    sync.Mutex
	nets  []*netCut           // the client workers' proxies
	fault *proxy.RequestFault // in force on them; nil for none
}

// proxiedClient starts proxies to endpoints, registers them (see addNet), and a Go client for
// process that goes through them: a client worker's view of the cluster, which the network
// faults cut.
func (wl *Workload) proxiedClient(process int, endpoints []Endpoint) (*netCut, *client.Client, error) {
	nc, err := newNetCut(endpoints, wl.cfg.scheme(), wl.cfg.ProxyTLS, wl.cfg.TLS)
	if err != nil {
		return nil, nil, err
	}
	wl.addNet(nc)
	c, err := client.New(nc.Endpoints(), wl.cfg.clientOptions(process, client.WithRequestTimeout(wl.cfg.OpTimeout),
		client.WithRetryTimeout(2*wl.cfg.OpTimeout))...)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("workload: client: %w", err)
	}
	return nc, c, nil
}

// addNet registers a client worker's proxies, and installs the fault in force on them.
func (wl *Workload) addNet(n *netCut) {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	wl.nets = append(wl.nets, n)
	n.setFault(wl.fault)
}

// SetRequestFault installs f on the proxies of every client worker, present and to come, so
// that it decides what the network does to their requests; nil removes it. It reports whether
// the workload has client workers for it to act on.
func (wl *Workload) SetRequestFault(f *proxy.RequestFault) bool {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	wl.fault = f
	for _, n := range wl.nets {
		n.setFault(f)
	}
	return wl.cfg.ClientWorkers > 0
}

// New returns a workload over the endpoints, recording into rec and writing to res.
func New(cfg Config, rec *history.Recorder, endpoints []Endpoint, res *Resource) *Workload {
	return &Workload{cfg: cfg, rec: rec, c: NewClient(rec, endpoints, cfg), res: res,
		kinds: NewKindResource(rec, false), pauses: make(chan time.Duration, 1)}
}

// Crashes returns how many times a worker crashed holding a lock.
func (wl *Workload) Crashes() int64 { return wl.crashes.Load() }

// Cuts returns how many times a client worker was cut off from the cluster holding a lock.
func (wl *Workload) Cuts() int64 { return wl.cuts.Load() }

// Client is the workload's HTTP client.
func (wl *Workload) Client() *Client { return wl.c }

// PauseHolder asks the next worker that takes a lock to stop for d — renewals included —
// between taking the lock and writing to the resource. It reports false if a pause is already
// pending.
func (wl *Workload) PauseHolder(d time.Duration) bool {
	select {
	case wl.pauses <- d:
		return true
	default:
		return false
	}
}

// Run runs the workers (the last ClientWorkers of them through the Go client) until stop is
// closed, then lets each release what it holds and destroy its session, and returns when all
// are done. ctx aborts requests in flight; it should outlive stop by a few TTLs. An error means
// a client worker could not be set up; the workers already started have then stopped too.
func (wl *Workload) Run(ctx context.Context, stop <-chan struct{}) error {
	raw := wl.cfg.Workers - wl.cfg.ClientWorkers
	var cws []*ClientWorker
	var kws []*KindWorker
	closeAll := func() {
		for _, w := range cws {
			w.close()
		}
		for _, w := range kws {
			w.c.Close()
			w.net.Close()
		}
	}
	for i := raw; i < wl.cfg.Workers; i++ {
		w, err := wl.newClientWorker(i, i-raw, wl.c.Endpoints())
		if err != nil {
			closeAll()
			return err
		}
		cws = append(cws, w)
	}
	for k := range wl.cfg.kindWorkers() {
		w, err := wl.newKindWorker(kindProcess(wl.cfg, k), k < wl.cfg.SemaphoreWorkers, k == wl.cfg.SemaphoreWorkers)
		if err != nil {
			closeAll()
			return err
		}
		kws = append(kws, w)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, w := range cws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, stop)
		}()
	}
	for _, w := range kws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, stop)
		}()
	}
	if wl.cfg.ClientWorkers > 0 {
		wl.observe(ctx, stop, &wg)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		wl.sample(ctx, stop)
	}()
	wl.watch(ctx, stop, &wg)
	for i := 0; i < raw; i++ {
		w := &Worker{id: i, cfg: wl.cfg, c: wl.c, res: wl.res, rec: wl.rec, pauses: wl.pauses, crashes: &wl.crashes,
			rng: rand.New(rand.NewSource(wl.cfg.Seed*1000 + int64(i)))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx, stop)
		}()
	}
	return nil
}

// Worker is one client: a loop over sessions and locks.
type Worker struct {
	id      int
	cfg     Config
	c       *Client
	res     *Resource
	rec     *history.Recorder
	pauses  <-chan time.Duration
	crashes *atomic.Int64
	rng     *rand.Rand
	tries   int // acquires sent, to name each one's attempt
	// indexes is the last modify_index read of each lock, where a blocking read starts.
	indexes map[string]uint64
}

// pick chooses the node for the next request.
func (w *Worker) pick(rng *rand.Rand) Endpoint {
	eps := w.c.Endpoints()
	return eps[rng.Intn(len(eps))]
}

// sleepOrStop sleeps d, and reports false at once if stop closes first.
func sleepOrStop(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

func (w *Worker) jitter(max time.Duration) time.Duration { return jitter(w.rng, max) }

// jitter is a random duration in [0, max), or 0 when max is not positive.
func jitter(rng *rand.Rand, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(rng.Int63n(int64(max)))
}

func (w *Worker) run(ctx context.Context, stop <-chan struct{}) {
	var s *session
	defer func() {
		if s != nil {
			w.abandon(ctx, s)
		}
	}()
	for !stopped(stop) && ctx.Err() == nil {
		if s != nil && s.lost.Load() {
			s.stopKeepalive()
			s = nil
		}
		if s == nil {
			if s = w.newSession(ctx, stop); s == nil {
				return
			}
		}
		if w.rng.Float64() < w.cfg.BlockingReadRatio {
			w.watch(ctx)
			continue
		}
		lock := w.cfg.Locks[w.rng.Intn(len(w.cfg.Locks))]
		var wait time.Duration
		if w.rng.Float64() < 0.6 {
			wait = 100*time.Millisecond + w.jitter(w.cfg.MaxWait)
		}
		w.tries++
		attempt := fmt.Sprintf("w%d-%d", w.id, w.tries)
		op := w.c.Acquire(ctx, w.pick(w.rng), w.id, lock, s.id, attempt, wait, history.PhaseMain)
		switch {
		case op.Type == history.OK && w.rng.Float64() < w.cfg.CrashRatio:
			s.stopKeepalive()
			s = nil
			w.crashes.Add(1)
		case op.Type == history.OK:
			if !w.hold(ctx, stop, s, lock, op.OutToken) {
				w.abandon(ctx, s)
				s = nil
			}
		case op.Type == history.Info:
			// Half the time, cancel the attempt and keep the session: the cancel bounds how
			// long the lost acquire can take effect. Otherwise (or if the cancel's outcome stays
			// unknown) learn what happened and give the session up: its destroy bounds it.
			if w.rng.Intn(2) == 0 && w.cancel(ctx, stop, s, lock, attempt) {
				continue
			}
			w.c.Read(ctx, w.pick(w.rng), w.id, lock)
			w.abandon(ctx, s)
			s = nil
		case op.Code == api.CodeSessionNotFound:
			s.lost.Store(true)
		default:
			sleepOrStop(stop, w.jitter(50*time.Millisecond))
		}
	}
}

// watch waits for a change of a lock with a blocking read from the last modify_index the worker
// read of it (reading it first if it has none).
func (w *Worker) watch(ctx context.Context) {
	lock := w.cfg.Locks[w.rng.Intn(len(w.cfg.Locks))]
	index, ok := w.indexes[lock]
	if !ok {
		w.read(ctx, lock)
		if index, ok = w.indexes[lock]; !ok {
			return
		}
	}
	op := w.c.ReadBlocking(ctx, w.pick(w.rng), w.id, lock, index, 100*time.Millisecond+w.jitter(w.cfg.MaxWait))
	w.learn(op)
}

// read reads the lock and remembers its modify_index.
func (w *Worker) read(ctx context.Context, lock string) {
	w.learn(w.c.Read(ctx, w.pick(w.rng), w.id, lock))
}

// learn remembers the modify_index a read answered.
func (w *Worker) learn(op history.Op) {
	if op.Type != history.OK {
		return
	}
	if w.indexes == nil {
		w.indexes = map[string]uint64{}
	}
	w.indexes[op.Lock] = max(w.indexes[op.Lock], op.OutIndex)
}

// cancel cancels the attempt of a lost acquire until the cancel's outcome is definite, and
// releases a grant it reports. It returns false when the session must be abandoned instead.
func (w *Worker) cancel(ctx context.Context, stop <-chan struct{}, s *session, lock, attempt string) bool {
	for try := 0; try < 5; try++ {
		op := w.c.Cancel(ctx, w.pick(w.rng), w.id, lock, s.id, attempt)
		switch {
		case op.Code == api.CodeSessionNotFound:
			s.lost.Store(true)
			return true
		case op.Type == history.OK && !op.Held:
			return true
		case op.Type == history.OK:
			// A grant came first: give it back, as a client that gave up would.
			release := w.c.Release(ctx, w.pick(w.rng), w.id, lock, s.id, op.OutToken)
			return release.Type == history.OK || release.Code == api.CodeNotHolder
		}
		if !sleepOrStop(stop, 100*time.Millisecond) { // no leader, or an unknown outcome
			return false
		}
	}
	return false
}

// hold uses a granted lock: maybe read it, maybe pause, write to the resource, hold a while,
// release. It returns false when the session must be abandoned.
func (w *Worker) hold(ctx context.Context, stop <-chan struct{}, s *session, lock string, token uint64) bool {
	if w.rng.Float64() < w.cfg.ReadRatio {
		w.read(ctx, lock)
	}
	w.maybePause(ctx, s, lock, token)
	w.res.Write(w.id, lock, s.id, token, fmt.Sprintf("worker-%d", w.id))
	sleepOrStop(stop, w.jitter(w.cfg.MaxHold))
	for attempt := 0; attempt < 3; attempt++ {
		op := w.c.Release(ctx, w.pick(w.rng), w.id, lock, s.id, token)
		switch {
		case op.Type == history.OK, op.Code == api.CodeNotHolder:
			return true
		case op.Code == api.CodeSessionNotFound:
			s.lost.Store(true)
			return true
		case op.Type == history.Info:
			// Read the lock to learn what happened before doing anything else with the session.
			w.c.Read(ctx, w.pick(w.rng), w.id, lock)
			return false
		}
		time.Sleep(100 * time.Millisecond) // a definite refusal such as no_leader: back off
	}
	return false
}

// maybePause takes a pending client pause: the worker and its renewals stop for the pause,
// still believing they hold the lock, and then write with the old token.
func (w *Worker) maybePause(ctx context.Context, s *session, lock string, token uint64) {
	var d time.Duration
	select {
	case d = <-w.pauses:
	default:
		return
	}
	id := w.rec.NewFaultID()
	detail := fmt.Sprintf("worker %d holding %s under token %d stops for %s", w.id, lock, token, d.Round(time.Millisecond))
	inv := w.rec.Now()
	w.rec.Add(history.Op{Process: w.id, Kind: history.Nemesis, Type: history.OK, Fault: FaultClientPause,
		Action: history.ActionStart, FaultID: id, Detail: detail, Invoke: inv})
	s.gate.Lock()
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	s.gate.Unlock()
	inv = w.rec.Now()
	w.rec.Add(history.Op{Process: w.id, Kind: history.Nemesis, Type: history.OK, Fault: FaultClientPause,
		Action: history.ActionStop, FaultID: id, Detail: detail, Invoke: inv})
}
