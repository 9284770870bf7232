package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// streamIdle is how long a streamed watcher waits without any event (the server sends a
// progress event every 5 s) before it takes its stream for lost and opens another.
const streamIdle = 20 * time.Second

// runStream watches over raw streamed watches (GET /v1/locks?prefix=&index= with Accept:
// text/event-stream), linearizable or stale as the watcher is, one node at a time: it records
// each change and reset as it comes, and when its stream ends (an end event, a reset that ends
// it, a cut connection, silence) it opens another on the next node from the last index it
// reached. Once stop closes it reads on until it has reached the index of every change
// acknowledged before (progress events count: every change up to theirs was sent).
//
// With Config.IgnoreStreamEnd it is broken on purpose: it takes no notice of its stream's end
// and never opens another, as a watcher would that kept a silent stale stream (a follower cut
// off from its leader). The watch checker must flag it.
func (w *watcher) runStream(ctx context.Context, stop <-chan struct{}) {
	var end history.Op
	var deadline time.Time
	var target uint64
	draining, silent := false, false
	for ctx.Err() == nil {
		if silent && !draining {
			// Broken on purpose: it waits, silent, for the run to end.
			select {
			case <-stop:
			case <-ctx.Done():
				return
			}
		}
		if !draining && stopped(stop) {
			var ok bool
			if end, deadline, target, ok = w.startDrain(ctx); !ok {
				return
			}
			draining = true
		}
		if draining && (silent || w.index >= target || time.Now().After(deadline)) {
			break
		}
		sctx, cancel := context.WithCancel(ctx)
		if draining {
			stopAt := time.AfterFunc(time.Until(deadline), cancel)
			err := w.stream(sctx, func() bool { return w.index >= target })
			stopAt.Stop()
			cancel()
			silent = w.afterStream(ctx, err)
			continue
		}
		go func() {
			select {
			case <-stop:
				cancel()
			case <-sctx.Done():
			}
		}()
		err := w.stream(sctx, nil)
		cancel()
		if !stopped(stop) {
			silent = w.afterStream(ctx, err)
		}
	}
	if !draining {
		return
	}
	end.Complete = w.wl.rec.Now()
	end.Detail = fmt.Sprintf("streamed up to %d (%d streams ended)", w.index, w.failed)
	switch {
	case w.index >= target:
		end.Type = history.OK
	case silent:
		end.Error = fmt.Sprintf("index %d, short of %d: it ignored its stream's end and stayed silent (self-test)", w.index, target)
	default:
		end.Error = fmt.Sprintf("index %d, short of %d after %s", w.index, target, watchDrain)
	}
	w.wl.rec.Add(end)
}

// afterStream moves to the next node after a stream ended, after a pause. A broken watcher
// (Config.IgnoreStreamEnd) does not: it reports true, and stays silent from then on.
func (w *watcher) afterStream(ctx context.Context, err error) (silent bool) {
	w.failed++
	if w.wl.cfg.IgnoreStreamEnd && err != nil && ctx.Err() == nil {
		return true
	}
	w.node = (w.node + 1) % len(w.wl.c.Endpoints())
	pause := time.NewTimer(50*time.Millisecond + jitter(w.rng, 100*time.Millisecond))
	defer pause.Stop()
	select {
	case <-pause.C:
	case <-ctx.Done():
	}
	return false
}

// stream opens one stream at the watcher's node from its index and records its events until
// it ends (the error says why) or done says the watcher has gone far enough.
func (w *watcher) stream(ctx context.Context, done func() bool) error {
	ep := w.wl.c.Endpoints()[w.node]
	from := w.index
	q := url.Values{"prefix": {WatchPrefix}, "index": {strconv.FormatUint(from, 10)}}
	if w.stale {
		q.Set("consistency", "stale")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.wl.cfg.scheme()+"://"+ep.Addr+"/v1/locks?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if tok := w.wl.cfg.token(w.process); tok != "" {
		req.Header.Set(api.HeaderToken, tok)
	}
	idle := time.AfterFunc(w.wl.cfg.OpTimeout+streamIdle, cancel)
	defer idle.Stop()
	resp, err := w.wl.c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("stream: %s: %s", resp.Status, body)
	}
	since := w.wl.rec.Now()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	var name string
	var data []byte
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
			continue
		case strings.HasPrefix(line, "data: "):
			data = []byte(line[len("data: "):])
			continue
		case line != "":
			continue
		}
		idle.Reset(streamIdle)
		now := w.wl.rec.Now()
		err := w.streamEvent(ep, from, since, now, name, data)
		since, name, data = now, "", nil
		if err != nil {
			return err
		}
		if done != nil && done() {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("stream: the answer ended")
}

// streamEvent records one event of a stream opened at index from.
func (w *watcher) streamEvent(ep Endpoint, from uint64, invoke, complete int64, name string, data []byte) error {
	base := history.Op{Process: w.process, Type: history.OK, Invoke: invoke, Complete: complete, Node: ep.ID, Index: from}
	switch name {
	case api.EventReset:
		var r api.StreamReset
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("stream: reset: %w", err)
		}
		if r.Locks == nil {
			return fmt.Errorf("stream: reset (%s): the stream ends", r.Reason)
		}
		op := base
		op.Kind, op.OutIndex = history.WatchReset, r.Index
		w.wl.rec.Add(op)
		for _, l := range r.Locks {
			op := base
			op.Kind, op.Lock, op.Held, op.OutSession, op.OutToken, op.OutIndex, op.Detail =
				history.WatchChange, l.Name, l.Held, l.Session, l.Token, l.ModifyIndex, "reset"
			w.wl.rec.Add(op)
		}
		w.index = max(w.index, r.Index)
	case api.EventChange:
		var c api.StreamChange
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("stream: change: %w", err)
		}
		for _, l := range c.Locks {
			if w.drop() {
				continue
			}
			op := base
			op.Kind, op.Lock, op.Held, op.OutSession, op.OutToken, op.OutIndex =
				history.WatchChange, l.Name, l.Held, l.Session, l.Token, l.ModifyIndex
			w.wl.rec.Add(op)
		}
		w.index = max(w.index, c.Index)
	case api.EventProgress:
		var p api.StreamProgress
		if err := json.Unmarshal(data, &p); err != nil {
			return fmt.Errorf("stream: progress: %w", err)
		}
		w.index = max(w.index, p.Index)
	case api.EventEnd:
		return fmt.Errorf("stream: ended: %s", data)
	}
	return nil
}
