package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/embed"
	"github.com/raftlock/raftlock/jepsen/history"
)

// The worker process: an embedded node and its workers, configured by environment variables
// (the test starts its own binary with envWorker set).
const (
	envWorker  = "RAFTLOCK_EMBEDDED_WORKER" // set: run as a worker process
	envID      = "RAFTLOCK_EMBEDDED_ID"
	envPeers   = "RAFTLOCK_EMBEDDED_PEERS"
	envDir     = "RAFTLOCK_EMBEDDED_DIR"
	envHistory = "RAFTLOCK_EMBEDDED_HISTORY"
	envProcess = "RAFTLOCK_EMBEDDED_PROCESS" // first process number of this incarnation's workers
	envNaive   = "RAFTLOCK_EMBEDDED_NAIVE"   // set: believe until Context is done, not checking Deadline
)

// Workload shape.
const (
	workersPerNode = 3
	lockCount      = 3
	ttl            = 2 * time.Second
)

// event is a line of a worker process's history file: a finished op, or a step of a belief.
type event struct {
	Op *history.Op `json:"op,omitempty"`
	// Belief names a belief (unique in the run): with Op, it began; with Until, it was
	// confirmed until then; with End, it ended (at Until).
	Belief string `json:"belief,omitempty"`
	Until  int64  `json:"until,omitempty"`
	End    bool   `json:"end,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// monoNow reads the machine's monotonic clock, which every process shares (Go's own monotonic
// readings are relative to the process's start) and which runs on while a process is stopped.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// recorder appends events to the history file, one write each, so that a killed process
// loses none it wrote.
type recorder struct {
	mu sync.Mutex
	f  *os.File
}

func (r *recorder) emit(e event) {
	data, err := json.Marshal(e)
	if err != nil {
		panic(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(append(data, '\n')); err != nil {
		panic(err)
	}
}

// workerMain runs a worker process until SIGTERM.
func workerMain() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := runWorkers(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		os.Exit(1)
	}
}

func runWorkers(ctx context.Context) error {
	peers, err := embed.ParsePeers(os.Getenv(envPeers))
	if err != nil {
		return err
	}
	id := os.Getenv(envID)
	f, err := os.OpenFile(os.Getenv(envHistory), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	node, err := embed.Start(ctx, embed.Config{ID: id, DataDir: os.Getenv(envDir), RaftAddr: peers[id], Peers: peers})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = node.Close(cctx)
	}()
	base, _ := strconv.Atoi(os.Getenv(envProcess))
	rec := &recorder{f: f}
	var wg sync.WaitGroup
	for i := range workersPerNode {
		w := &worker{p: base + i, c: node.Client(), rec: rec, naive: os.Getenv(envNaive) != "",
			rng: rand.New(rand.NewPCG(uint64(base+i), uint64(time.Now().UnixNano())))}
		wg.Go(func() { w.run(ctx) })
	}
	wg.Wait()
	return nil
}

// worker holds locks through the node's client, recording what it believes.
type worker struct {
	p     int
	c     *client.Client
	rec   *recorder
	naive bool
	rng   *rand.Rand
	seq   int
}

func (w *worker) run(ctx context.Context) {
	for ctx.Err() == nil {
		s, err := w.c.NewSession(ctx, client.WithTTL(ttl))
		if err != nil {
			sleep(ctx, 100*time.Millisecond)
			continue
		}
		now := monoNow()
		w.rec.emit(event{Op: &history.Op{Process: w.p, Kind: history.ClientSession, Type: history.OK, Session: s.ID(),
			Invoke: now, Complete: now, TTLNS: int64(ttl)}})
		for range 3 + w.rng.IntN(10) {
			if ctx.Err() != nil || s.Err() != nil {
				break
			}
			w.holdOnce(ctx, s, fmt.Sprintf("embedded-lock-%d", w.rng.IntN(lockCount)))
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.Close(cctx)
		cancel()
	}
}

// holdOnce takes name with Lock, TryLock or Campaign, holds it a while if it got it, and lets
// it go.
func (w *worker) holdOnce(ctx context.Context, s *client.Session, name string) {
	api := []string{"lock", "trylock", "campaign"}[w.rng.IntN(3)]
	wait := time.Duration(100+w.rng.IntN(int(2*ttl/time.Millisecond))) * time.Millisecond
	lctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	op := &history.Op{Process: w.p, Kind: history.ClientAcquire, Lock: name, Session: s.ID(), API: api, Invoke: monoNow()}
	var (
		hold    context.Context
		token   func() uint64
		release func(context.Context) error
		err     error
	)
	switch api {
	case "campaign":
		e := client.NewElection(s, name)
		err = e.Campaign(lctx, fmt.Sprintf("p%d", w.p))
		hold, token, release = e.Context(), e.Token, e.Resign
	default:
		m := client.NewMutex(s, name)
		if api == "lock" {
			err = m.Lock(lctx)
		} else {
			err = m.TryLock(lctx)
		}
		hold, token, release = m.Context(), m.Token, m.Unlock
	}
	op.Complete = monoNow()
	w.recordAcquire(op, err, token())
	if err != nil {
		return
	}
	w.believe(ctx, s, op, hold, token())
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	_ = release(rctx)
}

// recordAcquire records a call that takes a lock: ok with the token, fail for a refusal that
// names the holder, info otherwise.
func (w *worker) recordAcquire(op *history.Op, err error, token uint64) {
	var ae *client.APIError
	switch {
	case err == nil:
		op.Type, op.OutToken = history.OK, token
	case errors.As(err, &ae) && errors.Is(err, client.ErrLockHeld) && ae.Holder != nil:
		op.Type, op.Code, op.OutSession, op.OutToken = history.Fail, ae.Code, ae.Holder.Session, ae.Holder.Token
	default:
		op.Type, op.Error = history.Info, err.Error()
	}
	w.rec.emit(event{Op: op})
}

// believe records the belief in a hold from its first successful check to its last, reading
// the lock now and then, for 50–500 ms of work.
func (w *worker) believe(ctx context.Context, s *client.Session, acq *history.Op, hold context.Context, token uint64) {
	w.seq++
	id := fmt.Sprintf("%d-%d", w.p, w.seq)
	end := time.Now().Add(time.Duration(50+w.rng.IntN(450)) * time.Millisecond)
	began := false
	last := int64(0)
	for {
		t := monoNow()
		if !w.holds(hold, s) {
			if began {
				w.rec.emit(event{Belief: id, Until: last, End: true, Detail: "context done: " + lossCause(hold, s)})
			}
			return
		}
		if !began {
			w.rec.emit(event{Belief: id, Op: &history.Op{Process: w.p, Kind: history.Believe, Type: history.OK,
				Lock: acq.Lock, Session: s.ID(), API: acq.API, OutToken: token, Invoke: t, Complete: t}})
			began = true
		} else {
			w.rec.emit(event{Belief: id, Until: t})
		}
		last = t
		if time.Now().After(end) || ctx.Err() != nil {
			w.rec.emit(event{Belief: id, Until: last, End: true, Detail: "released"})
			return
		}
		if w.rng.IntN(5) == 0 {
			w.read(ctx, acq.Lock)
		}
		time.Sleep(time.Duration(5+w.rng.IntN(15)) * time.Millisecond)
	}
}

// holds is the check before acting on a hold: its context is not done, and (unless naive) the
// session's local deadline is still ahead, which a process resumed from a pause finds passed
// before its timers have run.
func (w *worker) holds(hold context.Context, s *client.Session) bool {
	if hold.Err() != nil {
		return false
	}
	return w.naive || time.Until(s.Deadline()) > 0
}

func lossCause(hold context.Context, s *client.Session) string {
	if err := context.Cause(hold); err != nil {
		return err.Error()
	}
	return "the session's deadline passed (" + strings.TrimPrefix(time.Until(s.Deadline()).String(), "-") + " ago)"
}

// read reads the lock linearizably and records what the server answered.
func (w *worker) read(ctx context.Context, name string) {
	op := &history.Op{Process: w.p, Kind: history.Read, Lock: name, Invoke: monoNow()}
	l, err := w.c.GetLock(ctx, name)
	op.Complete = monoNow()
	if err != nil {
		op.Type, op.Error = history.Info, err.Error()
	} else {
		op.Type, op.Held, op.OutSession, op.OutToken, op.OutIndex = history.OK, l.Held, l.Session, l.Token, l.ModifyIndex
	}
	w.rec.emit(event{Op: op})
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
