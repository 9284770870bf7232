package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/jepsen/history"
)

// KindWorker holds a semaphore (client.Semaphore) or a read/write lock (client.RWMutex) through
// the Go client, as users do, and uses the KindResource under each hold's token. It records
// each call that takes a hold (history.HoldWait), what it believed (history.Hold) and its
// accesses to the resource (history.HoldAccess). Now and then it stops as a paused process
// would, right after a grant, for longer than its session lives (its network cut, so that
// nothing is renewed), and then accesses the resource under its old token anyway: the
// resource must refuse it once the hold has passed on far enough. Writers of a read/write lock
// wait up to Config.WriterWait, so that one that starves shows; its readers hold it for up to
// a second and ask again at once, so that their holds overlap and a lock that let readers
// overtake a waiting writer would starve it. The first read/write-lock worker only writes,
// the others only read.
type KindWorker struct {
	id     int
	api    string // history.APIPermit for a semaphore's worker, else the mode of each hold is drawn
	writer bool   // a read/write-lock worker that only writes
	lock   string
	limit  int
	cfg    Config
	rec    *history.Recorder
	res    *KindResource
	rng    *rand.Rand
	net    *netCut
	c      *client.Client
}

// kindHold is one hold's calls, whatever the primitive.
type kindHold struct {
	api            string
	take, try, rel func(context.Context) error
	token          func() uint64
	context        func() context.Context
}

// newKindWorker starts the worker's proxies and client; process is its process id.
func (wl *Workload) newKindWorker(process int, semaphore, writer bool) (*KindWorker, error) {
	nc, c, err := wl.proxiedClient(process, wl.c.Endpoints())
	if err != nil {
		return nil, err
	}
	w := &KindWorker{id: process, writer: writer, cfg: wl.cfg, rec: wl.rec, res: wl.kinds, net: nc, c: c,
		rng: rand.New(rand.NewSource(wl.cfg.Seed*1000 + int64(process)))}
	if semaphore {
		w.api, w.lock, w.limit = history.APIPermit, SemaphoreLock, wl.cfg.SemaphoreLimit
	} else {
		w.lock = RWLock
	}
	return w, nil
}

// The locks of the semaphore and read/write-lock workers.
const (
	SemaphoreLock = "jepsen-semaphore"
	RWLock        = "jepsen-rwlock"
)

// run takes holds until stop closes, then closes its session.
func (w *KindWorker) run(ctx context.Context, stop <-chan struct{}) {
	defer func() {
		w.c.Close()
		w.net.Close()
	}()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-sctx.Done():
		}
		cancel()
	}()
	var s *client.Session
	defer func() {
		if s != nil {
			cctx, cancel := context.WithTimeout(ctx, 2*w.cfg.OpTimeout)
			_ = s.Close(cctx)
			cancel()
		}
	}()
	for !stopped(stop) && ctx.Err() == nil {
		if s != nil && s.Err() != nil {
			_ = s.Close(ctx)
			s = nil
		}
		if s == nil {
			var err error
			cctx, cancel := context.WithTimeout(ctx, 2*w.cfg.OpTimeout)
			s, err = w.c.NewSession(cctx, client.WithTTL(w.cfg.TTL), client.WithSessionName(fmt.Sprintf("jepsen-kind-%d", w.id)))
			cancel()
			if err != nil {
				s = nil
				if !sleepOrStop(stop, 100*time.Millisecond) {
					return
				}
				continue
			}
		}
		w.take(ctx, sctx, stop, s)
	}
}

// newHold makes this hold's primitive: a semaphore's permit, or a read or write hold.
func (w *KindWorker) newHold(s *client.Session) kindHold {
	if w.api == history.APIPermit {
		x := client.NewSemaphore(s, w.lock, w.limit, client.WithWaitChunk(w.cfg.TTL))
		return kindHold{history.APIPermit, x.Acquire, x.TryAcquire, x.Release, x.Token, x.Context}
	}
	rw := client.NewRWMutex(s, w.lock, client.WithWaitChunk(w.cfg.TTL))
	if !w.writer {
		return kindHold{history.APIShared, rw.RLock, rw.TryRLock, rw.RUnlock, rw.Token, rw.Context}
	}
	return kindHold{history.APIExclusive, rw.Lock, rw.TryLock, rw.Unlock, rw.Token, rw.Context}
}

// take takes one hold and, if granted, uses it.
func (w *KindWorker) take(ctx, sctx context.Context, stop <-chan struct{}, s *client.Session) {
	h := w.newHold(s)
	// A writer always waits, up to WriterWait: a writer that starves must show as one.
	wait := time.Duration(0)
	switch {
	case h.api == history.APIExclusive:
		wait = w.cfg.WriterWait
	case w.rng.Float64() < 0.75:
		wait = 100*time.Millisecond + jitter(w.rng, w.cfg.MaxWait)
	}
	op := history.Op{Process: w.id, Kind: history.HoldWait, Lock: w.lock, Session: s.ID(), API: h.api, Limit: w.limit,
		WaitNS: int64(wait)}
	call, cancel := sctx, context.CancelFunc(func() {})
	if wait > 0 {
		call, cancel = context.WithTimeout(sctx, wait)
	}
	op.Invoke = w.rec.Now()
	var err error
	if wait > 0 {
		err = h.take(call)
	} else {
		err = h.try(call)
	}
	cancel()
	op.Complete = w.rec.Now()
	switch {
	case err == nil:
		op.Type, op.OutToken = history.OK, h.token()
	case errors.Is(err, client.ErrLockHeld) || errors.Is(err, client.ErrLockDelayed):
		op.Type, op.Error = history.Fail, err.Error()
	default:
		op.Type, op.Error = history.Info, err.Error()
	}
	w.rec.Add(op)
	if err != nil || op.OutToken == 0 {
		sleepOrStop(stop, jitter(w.rng, 50*time.Millisecond))
		return
	}
	w.use(ctx, stop, s, h, op.OutToken)
}

// use works under a hold: maybe pause past its end, access the resource under the token, keep
// it a while, give it back. The belief lasts from the grant until the hold's context is done
// or the release begins.
func (w *KindWorker) use(ctx context.Context, stop <-chan struct{}, s *client.Session, h kindHold, token uint64) {
	start := w.rec.Now()
	holdCtx := h.context()
	b := &belief{ended: make(chan struct{})}
	unwatch := context.AfterFunc(holdCtx, func() { b.finish(w.rec.Now(), "context done: "+context.Cause(holdCtx).Error()) })
	defer unwatch()
	paused := ""
	if w.rng.Float64() < w.cfg.StaleRatio {
		// A paused process: nothing is renewed, and it learns of nothing, before it goes on
		// to use the resource under its old token.
		d := 2*w.cfg.TTL + jitter(w.rng, time.Second)
		paused = fmt.Sprintf("; paused %s after the grant", d.Round(time.Millisecond))
		w.net.cut(d)
		sleepOrStop(stop, d)
	}
	for range 1 + w.rng.Intn(2) {
		alive := holdCtx.Err() == nil
		if !alive && paused == "" {
			break // an honest holder stops when its hold ends
		}
		w.res.Access(w.id, w.lock, s.ID(), h.api, w.limit, token, !alive)
		hold := jitter(w.rng, w.cfg.MaxHold)
		if h.api == history.APIShared {
			hold = 150*time.Millisecond + jitter(w.rng, 350*time.Millisecond)
		}
		if !sleepOrStop(stop, hold) {
			break
		}
	}
	b.finish(w.rec.Now(), "release began")
	rctx, cancel := context.WithTimeout(ctx, 2*w.cfg.OpTimeout)
	err := h.rel(rctx)
	cancel()
	b.mu.Lock()
	end, detail := b.end, b.why+paused
	b.mu.Unlock()
	if err != nil {
		detail += "; release: " + err.Error()
	}
	w.rec.Add(history.Op{Process: w.id, Kind: history.Hold, Type: history.OK, Lock: w.lock, Session: s.ID(), API: h.api,
		Limit: w.limit, OutToken: token, Invoke: start, Complete: end, Detail: detail})
}
