package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/jepsen/history"
)

// Ways a client worker takes a lock, recorded in Op.API.
const (
	APILock     = "lock"
	APITryLock  = "trylock"
	APICampaign = "campaign"
)

// ClientWorker holds locks through the Go client (package client), as users do: a Session,
// then a Mutex (Lock, TryLock) or an Election (Campaign) per hold, work under Context, Unlock or
// Resign. Its client talks to the nodes through proxies of its own, so that its network can be
// cut (a client pause, or a holder cut off from the cluster) while the cluster is fine. It
// records its sessions, each call that takes a lock, what it believed (history.Believe) and its
// writes; the client's requests themselves are not recorded.
type ClientWorker struct {
	id        int
	cfg       Config
	rec       *history.Recorder
	res       *Resource
	pauses    <-chan time.Duration // nil for a worker whose resource does not check tokens
	cuts      *atomic.Int64
	rng       *rand.Rand
	net       *netCut
	c         *client.Client
	unchecked bool             // its writes go to a resource that does not check tokens
	cycler    bool             // keeps one session for many fast Lock/Unlock cycles (see cycle)
	stopCtx   context.Context  // ends when the workload stops: Lock calls end with it
	endSess   func(why string) // records the end of the current session, once
}

// newClientWorker starts the worker's proxies and client.
func (wl *Workload) newClientWorker(id, k int, endpoints []Endpoint) (*ClientWorker, error) {
	nc, c, err := wl.proxiedClient(id, endpoints)
	if err != nil {
		return nil, err
	}
	w := &ClientWorker{id: id, cfg: wl.cfg, rec: wl.rec, res: wl.res, cuts: &wl.cuts, net: nc, c: c,
		rng: rand.New(rand.NewSource(wl.cfg.Seed*1000 + int64(id))), unchecked: k%4 >= 2, cycler: k < wl.cfg.Cyclers}
	if !w.unchecked && !w.cycler {
		// Only writers whose resource checks tokens are paused: the pause is there to make a
		// stale write that fencing must see rejected. Cyclers are not: they keep their sessions.
		w.pauses = wl.pauses
	}
	return w, nil
}

// close stops the worker's client and proxies.
func (w *ClientWorker) close() {
	w.c.Close()
	w.net.Close()
}

// lockDelay is the lock-delay of this worker's sessions: half the workers use one.
func (w *ClientWorker) lockDelay() time.Duration {
	if w.id%2 == 1 {
		return w.cfg.LockDelay
	}
	return 0
}

func (w *ClientWorker) jitter(max time.Duration) time.Duration { return jitter(w.rng, max) }

// run takes locks until stop closes, then gives back what it holds and closes its session.
func (w *ClientWorker) run(ctx context.Context, stop <-chan struct{}) {
	defer w.close()
	var cancel context.CancelFunc
	w.stopCtx, cancel = context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
		case <-w.stopCtx.Done():
		}
		cancel()
	}()
	if w.cycler {
		w.cycle(ctx, stop)
		return
	}
	w.withSessions(ctx, stop, func(s *client.Session, _ bool) {
		w.take(ctx, stop, s, w.cfg.Locks[w.rng.Intn(len(w.cfg.Locks))])
	})
}

// withSessions calls step over and over with a live session until stop closes or ctx ends:
// a session found lost is closed and replaced by a new one, for which fresh is true; the last
// one is closed at the end.
func (w *ClientWorker) withSessions(ctx context.Context, stop <-chan struct{}, step func(s *client.Session, fresh bool)) {
	var s *client.Session
	defer func() {
		if s != nil {
			w.closeSession(ctx, s)
		}
	}()
	for !stopped(stop) && ctx.Err() == nil {
		if s != nil && s.Err() != nil {
			w.closeSession(ctx, s)
			s = nil
		}
		fresh := s == nil
		if fresh {
			if s = w.newSession(ctx, stop); s == nil {
				return
			}
		}
		step(s, fresh)
	}
}

// newSession creates a session, retrying until one is created or stop closes, and records its
// end once, when the worker begins closing it or the client finds it lost.
func (w *ClientWorker) newSession(ctx context.Context, stop <-chan struct{}) *client.Session {
	for {
		op := history.Op{Process: w.id, Kind: history.ClientSession, TTLNS: int64(w.cfg.TTL),
			LockDelayNS: int64(w.lockDelay()), Invoke: w.rec.Now()}
		opts := []client.SessionOption{client.WithTTL(w.cfg.TTL), client.WithSessionName(fmt.Sprintf("jepsen-client-%d", w.id))}
		if d := w.lockDelay(); d > 0 {
			opts = append(opts, client.WithLockDelay(d))
		}
		cctx, cancel := context.WithTimeout(ctx, 2*w.cfg.OpTimeout)
		s, err := w.c.NewSession(cctx, opts...)
		cancel()
		if err == nil {
			op.Type, op.Session = history.OK, s.ID()
			w.rec.Add(op)
			var once sync.Once
			end := func(why string) {
				once.Do(func() {
					w.rec.Add(history.Op{Process: w.id, Kind: history.ClientSessionEnd, Type: history.OK, Session: s.ID(),
						Invoke: w.rec.Now(), Detail: why})
				})
			}
			w.endSess = end
			context.AfterFunc(s.Context(), func() { end("lost: " + context.Cause(s.Context()).Error()) })
			return s
		}
		// The session may have been created anyway: it then expires, unused and unrecorded.
		op.Type, op.Error = history.Info, err.Error()
		w.rec.Add(op)
		if !sleepOrStop(stop, 50*time.Millisecond+w.jitter(100*time.Millisecond)) {
			return nil
		}
	}
}

// closeSession closes the session; a session already lost needs no destroy, but Close also
// stops its keepalive.
func (w *ClientWorker) closeSession(ctx context.Context, s *client.Session) {
	w.endSess("closing")
	cctx, cancel := context.WithTimeout(ctx, 2*w.cfg.OpTimeout)
	defer cancel()
	s.Close(cctx) // an error leaves the session to expire
}

// holder is a lock taken through the client: a Mutex or an Election.
type holder struct {
	api     string
	m       *client.Mutex
	e       *client.Election
	release func(context.Context) error
}

// newHolder makes the Mutex or Election for one hold.
func (w *ClientWorker) newHolder(s *client.Session, lock string) *holder {
	r := w.rng.Float64()
	switch {
	case r < 0.3:
		e := client.NewElection(s, lock)
		return &holder{api: APICampaign, e: e, release: e.Resign}
	case r < 0.55:
		m := client.NewMutex(s, lock)
		return &holder{api: APITryLock, m: m, release: m.Unlock}
	}
	m := client.NewMutex(s, lock, client.WithWaitChunk(w.chunk()))
	return &holder{api: APILock, m: m, release: m.Unlock}
}

// chunk is the wait of Lock's long polls: shorter than the longest Lock, so that Lock hands
// one long poll over to the next under faults too.
func (w *ClientWorker) chunk() time.Duration { return max(w.cfg.TTL, w.cfg.MaxWait/2) }

// acquire calls Lock, TryLock or Campaign and records the call; Lock and Campaign wait 0.1s to
// MaxWait. It returns whether the call succeeded, and the token Token gave right after it (0 if
// the hold was already forgotten, its session lost).
func (w *ClientWorker) acquire(ctx context.Context, s *client.Session, lock string, h *holder, detail string) (bool, uint64) {
	wait := 2 * w.cfg.OpTimeout
	if h.api != APITryLock {
		wait = 100*time.Millisecond + w.jitter(w.cfg.MaxWait)
	}
	return w.acquireFor(ctx, s, lock, h, detail, wait)
}

// acquireFor is acquire with the call's context ending after wait (recorded as the op's wait
// unless the call is a TryLock).
func (w *ClientWorker) acquireFor(ctx context.Context, s *client.Session, lock string, h *holder, detail string, wait time.Duration) (bool, uint64) {
	op := history.Op{Process: w.id, Kind: history.ClientAcquire, Lock: lock, Session: s.ID(), API: h.api, Detail: detail}
	if h.api != APITryLock {
		op.WaitNS = int64(wait)
	}
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	unstop := context.AfterFunc(w.stopCtx, cancel)
	defer unstop()
	op.Invoke = w.rec.Now()
	var err error
	switch h.api {
	case APICampaign:
		err = h.e.Campaign(cctx, fmt.Sprintf("client-worker-%d", w.id))
	case APITryLock:
		err = h.m.TryLock(cctx)
	default:
		err = h.m.Lock(cctx)
	}
	op.Complete = w.rec.Now()
	switch {
	case err == nil:
		op.Type, op.OutToken = history.OK, h.token()
	case errors.Is(err, client.ErrLockHeld) || errors.Is(err, client.ErrLockDelayed):
		op.Type, op.Error = history.Fail, err.Error() // a refusal: nothing was granted
		var ae *client.APIError
		if errors.As(err, &ae) {
			op.Code = ae.Code
			if ae.Holder != nil {
				op.OutSession, op.OutToken = ae.Holder.Session, ae.Holder.Token
			}
		}
	default:
		op.Type, op.Error = history.Info, err.Error()
	}
	w.rec.Add(op)
	return err == nil, op.OutToken
}

func (h *holder) token() uint64 {
	if h.e != nil {
		return h.e.Token()
	}
	return h.m.Token()
}

func (h *holder) context() context.Context {
	if h.e != nil {
		return h.e.Context()
	}
	return h.m.Context()
}

// take takes the lock once and, if granted, holds it. A holder that lost its lock with its
// session sometimes asks the same Mutex again at once, as a user who retries would: a client
// must not report a lock it cannot hold.
func (w *ClientWorker) take(ctx context.Context, stop <-chan struct{}, s *client.Session, lock string) {
	h := w.newHolder(s, lock)
	ok, token := w.acquire(ctx, s, lock, h, "")
	if !ok {
		sleepOrStop(stop, w.jitter(50*time.Millisecond))
		return
	}
	// Asking again at once, or later, once the server may have handed the lock on.
	if w.hold(ctx, stop, s, lock, h, token) && sleepOrStop(stop, w.jitter(2*w.cfg.TTL)) {
		if ok, token := w.acquire(ctx, s, lock, h, "asked again after losing the lock, without Unlock"); ok {
			w.hold(ctx, stop, s, lock, h, token)
		}
	}
}

// hold works under a granted lock: maybe read it, maybe stop (a client pause) or lose the
// network, write to the resource under the token, keep it a while, give it back. From the
// moment the call returned until its context is done or Unlock begins, the worker believes it
// holds the lock under token (with Config.IgnoreDone, until Unlock begins). It reports whether the hold
// ended because the session was lost and the worker, half the time, did not Unlock the Mutex.
func (w *ClientWorker) hold(ctx context.Context, stop <-chan struct{}, s *client.Session, lock string, h *holder, token uint64) (lostKept bool) {
	start := w.rec.Now()
	holdCtx := h.context()
	b, unwatch := w.watchBelief(holdCtx)
	defer unwatch()
	// A worker that ignores Done keeps working until its hold time is up, whatever happens.
	ended := b.ended
	if w.cfg.IgnoreDone {
		ended = nil
	}
	if w.rng.Float64() < w.cfg.ReadRatio {
		w.read(ctx, lock, h)
	}
	holdFor := w.jitter(w.cfg.MaxHold)
	if w.rng.Float64() < w.cfg.CrashRatio {
		// Cut off from the cluster as it is granted: the worker goes on working until its
		// hold's context is done, which must happen before the server hands the lock on.
		d := 2*w.cfg.TTL + w.jitter(time.Second)
		w.net.cut(d)
		w.cuts.Add(1)
		holdFor = 3 * w.cfg.TTL
	}
	checkedAt := w.rec.Now()
	alive := w.cfg.IgnoreDone || holdCtx.Err() == nil
	w.maybePause(ctx, lock, token)
	if alive {
		w.res.WriteAt(w.id, lock, s.ID(), token, fmt.Sprintf("client-worker-%d", w.id), w.unchecked, checkedAt)
	}
	t := time.NewTimer(holdFor)
	select {
	case <-t.C:
	case <-ended:
	case <-stop:
	}
	t.Stop()
	lost := holdCtx.Err() != nil && s.Err() != nil
	lostKept = lost && h.m != nil && !w.cfg.IgnoreDone && w.rng.Intn(2) == 0
	w.letGo(ctx, s, lock, h, token, start, b, !lostKept)
	return lostKept
}

// read reads the lock through the client (Election.Leader for a campaign), recorded as a read
// when it answers; the client retries on its own, so its answer lies somewhere in the call.
func (w *ClientWorker) read(ctx context.Context, lock string, h *holder) {
	op := history.Op{Process: w.id, Kind: history.Read, Lock: lock, Invoke: w.rec.Now()}
	rctx, cancel := context.WithTimeout(ctx, 2*w.cfg.OpTimeout)
	defer cancel()
	var l *api.Lock
	var err error
	if h.e != nil {
		l, err = h.e.Leader(rctx)
		if errors.Is(err, client.ErrElectionNoLeader) {
			l, err = &api.Lock{Name: lock}, nil
		}
	} else {
		l, err = w.c.GetLock(rctx, lock)
	}
	if err != nil {
		return // says nothing
	}
	op.Type, op.Held, op.OutIndex = history.OK, l.Held, l.ModifyIndex
	if l.Held {
		op.OutSession, op.OutToken = l.Session, l.Token
	}
	w.rec.Add(op)
}

// maybePause takes a pending client pause: the worker stops, and its network with it (so its
// session is not renewed), still about to write under its old token.
func (w *ClientWorker) maybePause(ctx context.Context, lock string, token uint64) {
	var d time.Duration
	select {
	case d = <-w.pauses:
	default:
		return
	}
	id := w.rec.NewFaultID()
	detail := fmt.Sprintf("client worker %d holding %s under token %d stops for %s", w.id, lock, token, d.Round(time.Millisecond))
	w.rec.Add(history.Op{Process: w.id, Kind: history.Nemesis, Type: history.OK, Fault: FaultClientPause,
		Action: history.ActionStart, FaultID: id, Detail: detail, Invoke: w.rec.Now()})
	w.net.cut(d)
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	w.rec.Add(history.Op{Process: w.id, Kind: history.Nemesis, Type: history.OK, Fault: FaultClientPause,
		Action: history.ActionStop, FaultID: id, Detail: detail, Invoke: w.rec.Now()})
}
