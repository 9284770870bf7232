package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// benchSession is one session kept alive by a worker.
type benchSession struct {
	id       string
	lastSent time.Time // send time of the last acknowledged renewal (or of the create)
	due      time.Time // when the next renewal should be sent
}

// sessionShared is what the creators and workers of the sessions workload share.
type sessionShared struct {
	c         *client.Client
	ttl       time.Duration
	measuring atomic.Bool
	toCreate  atomic.Int64 // sessions still to create; creators take one at a time
	created   atomic.Int64
	renewals  atomic.Int64 // acknowledged in the window
	late      atomic.Int64
	lost      atomic.Int64
	missed    atomic.Int64
	errs      errorLog
	// firstLoss is the number of live sessions at the first loss.
	firstLoss atomic.Int64
	// maxLost is how many losses end the workload; giveUp ends it.
	maxLost int64
	giveUp  context.CancelFunc
	gaveUp  atomic.Bool
}

// lose counts a lost session (in counter) and ends the workload past maxLost.
func (sh *sessionShared) lose(counter *atomic.Int64, err error) {
	counter.Add(1)
	sh.errs.add(err)
	lost := sh.lost.Load() + sh.missed.Load()
	sh.firstLoss.CompareAndSwap(0, sh.created.Load()-lost+1)
	if lost > sh.maxLost && sh.gaveUp.CompareAndSwap(false, true) {
		sh.giveUp()
	}
}

// create is one creator: it creates sessions while some are left to create and hands each to
// a worker, round robin. It returns the latencies of its creates.
func (sh *sessionShared) create(ctx context.Context, workers []*sessionWorker, first int) []time.Duration {
	var lat []time.Duration
	next := first
	for ctx.Err() == nil && sh.toCreate.Add(-1) >= 0 {
		for {
			sent := time.Now()
			info, err := sh.c.CreateSession(ctx, api.CreateSessionRequest{TTL: sh.ttl.String(), Name: "bench"})
			if err == nil {
				lat = append(lat, time.Since(sent))
				sh.created.Add(1)
				s := &benchSession{id: info.ID, lastSent: sent, due: sent.Add(sh.ttl / 3)}
				select {
				case workers[next%len(workers)].incoming <- s:
				case <-ctx.Done():
				}
				next++
				break
			}
			if ctx.Err() != nil {
				return lat
			}
			sh.errs.add(fmt.Errorf("create session: %w", err))
			sleep(ctx, 50*time.Millisecond)
		}
	}
	return lat
}

// sessionWorker renews its sessions in due order: every session is renewed every TTL/3 and
// new ones arrive in creation order, so a FIFO queue stays sorted by due time.
type sessionWorker struct {
	sh               *sessionShared
	incoming         chan *benchSession
	queue            []*benchSession
	head             int
	renewLat         []time.Duration
	maxDelay, maxGap time.Duration
}

func newSessionWorker(sh *sessionShared) *sessionWorker {
	return &sessionWorker{sh: sh, incoming: make(chan *benchSession, 256)}
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

// live returns the sessions the worker keeps, including any not yet taken from incoming.
// Call it only after run returned.
func (w *sessionWorker) live() []*benchSession {
	for {
		select {
		case s := <-w.incoming:
			w.push(s)
		default:
			return w.queue[w.head:]
		}
	}
}

// run renews until stop ends.
func (w *sessionWorker) run(ctx, stop context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for stop.Err() == nil {
		now := time.Now()
		if f := w.front(); f != nil && !f.due.After(now) {
			w.renew(ctx, w.pop())
			continue
		}
		next := now.Add(time.Hour)
		if f := w.front(); f != nil {
			next = f.due
		}
		timer.Reset(next.Sub(now))
		select {
		case <-stop.Done():
		case s := <-w.incoming:
			w.push(s)
		case <-timer.C:
		}
	}
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
		w.sh.lose(&w.sh.lost, fmt.Errorf("renew: %w", err))
	case time.Since(s.lastSent) >= ttl:
		w.push(s) // the server may still know it; destroy it at the end
		w.sh.lose(&w.sh.missed, fmt.Errorf("renew: no acknowledgement within the TTL: %w", err))
	default:
		w.sh.errs.add(fmt.Errorf("renew: %w", err))
		s.due = time.Now()
		w.push(s)
	}
}
