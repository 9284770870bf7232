package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/jepsen/history"
)

// runClient watches through the Go client's WatchPrefix, which goes on by itself through
// failed nodes and leader changes: the harness only records what it delivers. A change is
// recorded as asked from the last lower index delivered before it (the client asked from that
// index or a later one), and a resync as a reset from the index of the event before it.
func (w *watcher) runClient(ctx context.Context, stop <-chan struct{}) {
	urls := make([]string, 0, len(w.wl.c.Endpoints()))
	eps := w.wl.c.Endpoints()
	for k := range eps {
		urls = append(urls, w.wl.cfg.scheme()+"://"+eps[(w.node+k)%len(eps)].Addr)
	}
	c, err := client.New(urls, w.wl.cfg.clientOptions(w.process, client.WithRequestTimeout(w.wl.cfg.OpTimeout))...)
	if err != nil {
		w.wl.rec.Add(history.Op{Process: w.process, Kind: history.WatchEnd, Type: history.Info, Error: err.Error()})
		return
	}
	defer c.Close()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := c.WatchPrefix(wctx, WatchPrefix)
	var from uint64 // the last index delivered below the current one
	since := w.wl.rec.Now()
	take := func(ev client.WatchEvent) bool {
		now := w.wl.rec.Now()
		defer func() { since = now }()
		if ev.Err != nil {
			w.wl.rec.Add(history.Op{Process: w.process, Kind: history.WatchEnd, Type: history.Info, Invoke: since, Complete: now,
				Error: "the watch ended: " + ev.Err.Error()})
			return false
		}
		base := history.Op{Process: w.process, Type: history.OK, Invoke: since, Complete: now, Index: from}
		if ev.Resync {
			op := base
			op.Kind, op.OutIndex = history.WatchReset, ev.Index
			w.wl.rec.Add(op)
			for _, l := range ev.Locks {
				op := base
				op.Kind, op.Lock, op.Held, op.OutSession, op.OutToken, op.OutIndex, op.Detail =
					history.WatchChange, l.Name, l.Held, l.Session, l.Token, l.ModifyIndex, "reset"
				w.wl.rec.Add(op)
			}
		} else if !w.drop() {
			op := base
			op.Kind, op.Lock, op.Held, op.OutSession, op.OutToken, op.OutIndex =
				history.WatchChange, ev.Lock.Name, ev.Lock.Held, ev.Lock.Session, ev.Lock.Token, ev.Lock.ModifyIndex
			w.wl.rec.Add(op)
		}
		if ev.Index > w.index {
			from, w.index = w.index, ev.Index
		}
		return true
	}
	for !stopped(stop) {
		select {
		case ev, ok := <-events:
			if !ok || !take(ev) {
				return
			}
		case <-stop:
		}
	}
	w.drainClient(ctx, events, take)
}

// drainClient takes the client's events until a linearizable watch from the last index it
// delivered finds no change up to the index every acknowledged change is at or below.
func (w *watcher) drainClient(ctx context.Context, events <-chan client.WatchEvent, take func(client.WatchEvent) bool) {
	end, deadline, target, ok := w.startDrain(ctx)
	if !ok {
		return
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ans, err := w.get(ctx, w.wl.c.Endpoints()[w.node], w.index, 0, false)
		if err == nil && len(ans.Locks) == 0 && !ans.Reset && ans.Index >= target {
			end.Type, end.Complete = history.OK, w.wl.rec.Now()
			end.Detail = fmt.Sprintf("delivered up to %d, nothing more up to %d", w.index, ans.Index)
			w.wl.rec.Add(end)
			return
		}
		if err != nil {
			w.node = (w.node + 1) % len(w.wl.c.Endpoints())
		}
		select {
		case ev, ok := <-events:
			if !ok || !take(ev) {
				return
			}
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	end.Complete, end.Error = w.wl.rec.Now(), fmt.Sprintf("delivered up to %d, short of %d after %s", w.index, target, watchDrain)
	w.wl.rec.Add(end)
}
