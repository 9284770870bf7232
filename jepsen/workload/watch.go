package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// WatchPrefix is the prefix the watchers watch: every lock of the run is under it.
const WatchPrefix = "jepsen-lock-"

// watchDrain bounds how long a watcher may take, once the workload stopped, to reach the index
// of every change acknowledged before: the cluster may still be recovering from a fault.
const watchDrain = 60 * time.Second

// watch starts Config.Watchers prefix watchers of every lock of the run, of four kinds in
// turn: raw HTTP long polls (GET /v1/locks?prefix=&index=&wait=) asked linearizably (a
// follower forwards them to the leader), raw long polls asked stale (each answered by the node
// asked), the Go client's WatchPrefix (a streamed watch, served by the node asked), and raw
// streamed watches (text/event-stream), linearizable and stale in turn. Each records every change it receives (history.WatchChange),
// every reset (history.WatchReset), and when it stops (history.WatchEnd): once stop closes, it
// reads the index of every change acknowledged so far and watches on until it has reached it,
// so that the checker can require every acknowledged change to have reached every watcher, in
// order.
func (wl *Workload) watch(ctx context.Context, stop <-chan struct{}, wg *sync.WaitGroup) {
	for i := range wl.cfg.Watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &watcher{wl: wl, process: watcherProcess(wl.cfg, i), stale: i%4 == 1 || i%8 == 7,
				rng: rand.New(rand.NewSource(wl.cfg.Seed*7919 + int64(i))), node: i % len(wl.c.Endpoints())}
			switch i % 4 {
			case 2:
				w.runClient(ctx, stop)
			case 3:
				w.runStream(ctx, stop)
			default:
				w.run(ctx, stop)
			}
		}()
	}
}

// watcher is one prefix watcher.
type watcher struct {
	wl      *Workload
	process int
	stale   bool
	rng     *rand.Rand
	node    int    // the endpoint it asks; the next one after a failure
	index   uint64 // the index it watches from: 0 until the first answer
	failed  int    // requests that failed
	got     int    // changes received
}

// drop reports whether to leave the next change received out of the history (the self-test
// of Config.DropWatchChanges).
func (w *watcher) drop() bool {
	w.got++
	return w.wl.cfg.DropWatchChanges && w.got%7 == 0
}

func (w *watcher) run(ctx context.Context, stop <-chan struct{}) {
	for !stopped(stop) && ctx.Err() == nil {
		w.ask(ctx, 100*time.Millisecond+jitter(w.rng, 2*w.wl.cfg.TTL))
	}
	end, deadline, target, ok := w.startDrain(ctx)
	if !ok {
		return
	}
	for w.index < target && time.Now().Before(deadline) && ctx.Err() == nil {
		w.ask(ctx, 500*time.Millisecond)
	}
	end.Complete = w.wl.rec.Now()
	end.Detail = fmt.Sprintf("reached %d (%d requests failed)", w.index, w.failed)
	if w.index >= target {
		end.Type = history.OK
	} else {
		end.Error = fmt.Sprintf("index %d, short of %d after %s", w.index, target, watchDrain)
	}
	w.wl.rec.Add(end)
}

// ask sends one watch request from the watcher's index and records what it answered; after a
// failure it moves to the next node.
func (w *watcher) ask(ctx context.Context, wait time.Duration) {
	eps := w.wl.c.Endpoints()
	ep := eps[w.node]
	invoke := w.wl.rec.Now()
	ans, err := w.get(ctx, ep, w.index, wait, w.stale)
	complete := w.wl.rec.Now()
	if err != nil {
		w.failed++
		w.node = (w.node + 1) % len(eps)
		pause := time.NewTimer(50*time.Millisecond + jitter(w.rng, 100*time.Millisecond))
		defer pause.Stop()
		select {
		case <-pause.C:
		case <-ctx.Done():
		}
		return
	}
	base := history.Op{Process: w.process, Type: history.OK, Invoke: invoke, Complete: complete, Node: ep.ID, Index: w.index}
	detail := ""
	if ans.Reset {
		op := base
		op.Kind, op.OutIndex = history.WatchReset, ans.Index
		w.wl.rec.Add(op)
		detail = "reset"
	}
	for _, l := range ans.Locks {
		if detail == "" && w.drop() {
			continue
		}
		op := base
		op.Kind, op.Lock, op.Held, op.OutSession, op.OutToken, op.OutIndex, op.Detail =
			history.WatchChange, l.Name, l.Held, l.Session, l.Token, l.ModifyIndex, detail
		w.wl.rec.Add(op)
	}
	w.index = max(w.index, ans.Index)
}

// target returns the index the watcher must reach before it stops — that of a linearizable
// answer, which every change acknowledged before it was asked is at or below — and when it
// was asked.
func (w *watcher) target(ctx context.Context, deadline time.Time) (uint64, int64, error) {
	eps := w.wl.c.Endpoints()
	var last error
	for k := 0; time.Now().Before(deadline) && ctx.Err() == nil; k++ {
		at := w.wl.rec.Now()
		ans, err := w.get(ctx, eps[(w.node+k)%len(eps)], 0, 0, false)
		if err == nil {
			return ans.Index, at, nil
		}
		last = err
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return 0, 0, fmt.Errorf("not within %s: %w", watchDrain, last)
}

// get sends one watch request and decodes its answer.
func (w *watcher) get(ctx context.Context, ep Endpoint, index uint64, wait time.Duration, stale bool) (api.LockChanges, error) {
	var ans api.LockChanges
	q := url.Values{"prefix": {WatchPrefix}, "index": {strconv.FormatUint(index, 10)}, "wait": {wait.String()}}
	if stale {
		q.Set("consistency", "stale")
	}
	ctx, cancel := context.WithTimeout(ctx, wait+w.wl.cfg.OpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.wl.cfg.scheme()+"://"+ep.Addr+"/v1/locks?"+q.Encode(), nil)
	if err != nil {
		return ans, err
	}
	if tok := w.wl.cfg.token(w.process); tok != "" {
		req.Header.Set(api.HeaderToken, tok)
	}
	resp, err := w.wl.c.hc.Do(req)
	if err != nil {
		return ans, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return ans, err
	}
	if resp.StatusCode != http.StatusOK {
		return ans, fmt.Errorf("watch: %s: %s", resp.Status, body)
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return ans, fmt.Errorf("watch: %w", err)
	}
	return ans, nil
}

// startDrain begins a watcher's drain: the WatchEnd op it ends with, the drain's deadline and
// the index every acknowledged change is at or below. When no such index is found it records
// the op with the reason and returns false.
func (w *watcher) startDrain(ctx context.Context) (end history.Op, deadline time.Time, target uint64, ok bool) {
	end = history.Op{Process: w.process, Kind: history.WatchEnd, Type: history.Info, Invoke: w.wl.rec.Now()}
	deadline = time.Now().Add(watchDrain)
	target, at, err := w.target(ctx, deadline)
	if err != nil {
		end.Complete, end.Error = w.wl.rec.Now(), fmt.Sprintf("no index to reach: %v", err)
		w.wl.rec.Add(end)
		return end, deadline, 0, false
	}
	end.Invoke, end.OutIndex = at, target
	return end, deadline, target, true
}
