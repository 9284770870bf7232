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
			info, err := sh.c.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: sh.ttl.String(), Name: "bench"})
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

// run renews until stop ends. When the first session falls due it renews, in one request,
// every session due within renewLinger, up to maxRenewBatch: what the client library does for
// the sessions of one process.
func (w *sessionWorker) run(ctx, stop context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for stop.Err() == nil {
		now := time.Now()
		if f := w.front(); f != nil && !f.due.After(now) {
			var batch []*benchSession
			for f := w.front(); f != nil && len(batch) < maxRenewBatch && !f.due.After(now.Add(renewLinger)); f = w.front() {
				batch = append(batch, w.pop())
			}
			w.renew(ctx, batch)
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

const (
	// maxRenewBatch is the server's default limit of sessions in one batch renewal.
	maxRenewBatch = 1000
	// renewLinger is how far ahead of its due time a session joins a batch.
	renewLinger = 20 * time.Millisecond
)

// renew renews batch in one request and settles each session's outcome.
func (w *sessionWorker) renew(ctx context.Context, batch []*benchSession) {
	ttl := w.sh.ttl
	sent := time.Now()
	ids := make([]string, len(batch))
	// After the oldest lastSent+TTL the server may have expired that session: an answer
	// about it is useless, but the others still want theirs.
	oldest := batch[0].lastSent
	for i, s := range batch {
		ids[i] = s.id
		w.maxDelay = max(w.maxDelay, sent.Sub(s.due))
		if sent.Sub(s.lastSent) > ttl/2 {
			w.sh.late.Add(1)
		}
		if s.lastSent.Before(oldest) {
			oldest = s.lastSent
		}
	}
	// Every session gets at least TTL/3 for its answer.
	deadline := oldest.Add(ttl)
	if floor := sent.Add(ttl / 3); deadline.Before(floor) {
		deadline = floor
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	resp, err := w.sh.c.Raw().RenewSessions(rctx, ids)
	cancel()
	outcome := make(map[string]error, len(batch))
	if err == nil {
		for _, r := range resp.Renewed {
			outcome[r.ID] = nil
		}
		for _, id := range resp.NotFound {
			outcome[id] = client.ErrSessionNotFound
		}
		for _, id := range resp.Unknown {
			outcome[id] = errors.New("renew: outcome unknown (the session's expiry is in flight)")
		}
	}
	acked := time.Since(sent)
	for _, s := range batch {
		serr := err
		if err == nil {
			var ok bool
			if serr, ok = outcome[s.id]; !ok {
				serr = errors.New("renew: the answer left the session out")
			}
		}
		w.settle(ctx, s, sent, acked, serr)
	}
}

// settle records one session's renewal outcome and queues it again unless it is lost.
func (w *sessionWorker) settle(ctx context.Context, s *benchSession, sent time.Time, latency time.Duration, err error) {
	ttl := w.sh.ttl
	switch {
	case err == nil && sent.Sub(s.lastSent)+latency < ttl:
		w.maxGap = max(w.maxGap, sent.Sub(s.lastSent))
		s.lastSent, s.due = sent, sent.Add(ttl/3)
		if w.sh.measuring.Load() {
			w.renewLat = append(w.renewLat, latency)
			w.sh.renewals.Add(1)
		}
		w.push(s)
	case err == nil:
		// Acknowledged, but after the server may already have expired it.
		w.push(s)
		w.sh.lose(&w.sh.missed, errors.New("renew: acknowledged only after the TTL had run out"))
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
