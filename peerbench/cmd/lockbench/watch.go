package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"peerbench/internal/stats"
)

// The watch workload (-watchers N): N watchers of one key prefix, each told of every change
// under it; the harness makes -watch-changes changes one at a time (an acquire, then a release,
// of one lock under the prefix, through the backend's own Session) and times, for each, the
// moment the last watcher was told after the change was acknowledged. etcd: one clientv3 Watch
// per watcher on the prefix (WithPrefix), spread over the -conns client connections; raftlock
// (http): one streamed watch per watcher (Server-Sent Events, GET /v1/locks?prefix=P with
// Accept: text/event-stream), spread over the endpoints.

// prefixWatcher is a backend that can watch a key prefix.
type prefixWatcher interface {
	// watchPrefix watches prefix as watcher w until ctx ends: ready once the watch is in
	// place on a server, told(n) for each batch of n changes, in order.
	watchPrefix(ctx context.Context, w int, prefix string, ready func(), told func(n int)) error
}

// WatchResult is the watch workload's figures.
type WatchResult struct {
	Watchers int     `json:"watchers"`
	Changes  int     `json:"changes"`
	ReadyS   float64 `json:"ready_s"` // until every watcher's watch was in place
	// LastTold is, over the changes, change acknowledged -> the last watcher told; MedianTold
	// -> half of them told.
	LastTold   stats.Summary `json:"last_told"`
	MedianTold stats.Summary `json:"median_told"`
	// Missed counts deliveries that did not come within 30 s of their change; must be 0.
	Missed int `json:"missed"`
	Errors int `json:"errors"`
	// ServerCPUPerChangeS is the server processes' CPU (summed) from the first change until
	// every watcher was told of the last, per change, in seconds.
	ServerCPUPerChangeS float64 `json:"server_cpu_s_per_change"`
	// RSSPerWatcherBytes is the server processes' RSS (summed) with the watchers in place
	// minus before, per watcher.
	RSSPerWatcherBytes float64   `json:"rss_bytes_per_watcher"`
	FirstError         string    `json:"first_error,omitempty"`
	ServerRSSBeforeMB  []float64 `json:"server_rss_before_mb"`
	ServerRSSWatchMB   []float64 `json:"server_rss_watching_mb"`
}

// watch runs the watch workload.
func (h *harness) watch(ctx context.Context, watchers, changes int) (WatchResult, error) {
	res := WatchResult{Watchers: watchers, Changes: changes}
	pw, ok := h.b.(prefixWatcher)
	if !ok {
		return res, fmt.Errorf("backend %s cannot watch a prefix", h.b.Name())
	}
	prefix := "lockbench/" + h.runID + "/watch/"
	before := h.snapServers()
	told := make([]atomic.Int64, changes) // how many watchers were told of change k
	last := make([]atomic.Int64, changes) // when the last of them was (ns since t0)
	half := make([]atomic.Int64, changes) // when half of them were
	done := make([]chan struct{}, changes)
	for k := range done {
		done[k] = make(chan struct{})
	}
	t0 := time.Now()
	var ready, errs atomic.Int64
	var firstErr atomic.Value
	wctx, cancel := context.WithCancel(ctx)
	opening := make(chan struct{}, 256)
	var wg sync.WaitGroup
	for w := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen, counted, failures := 0, false, 0
			for wctx.Err() == nil {
				// At most 256 watches are being set up at once, as clients that start over
				// time would, for both systems.
				select {
				case opening <- struct{}{}:
				case <-wctx.Done():
					return
				}
				held := true
				err := pw.watchPrefix(wctx, w, prefix, func() {
					if held {
						held = false
						<-opening
					}
					failures = 0
					if !counted {
						counted = true
						ready.Add(1)
					}
				}, func(n int) {
					now := int64(time.Since(t0))
					for range n {
						if k := seen; k < changes {
							c := told[k].Add(1)
							if c == int64(watchers+1)/2 {
								half[k].Store(now)
							}
							if c == int64(watchers) {
								last[k].Store(now)
								close(done[k])
							}
						}
						seen++
					}
				})
				if held {
					<-opening
				}
				if err != nil && wctx.Err() == nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					failures++
					// 100 ms to 5 s, doubling with each failure in a row, jittered.
					pause := min(100*time.Millisecond<<min(failures, 6), 5*time.Second)
					sleepCtx(wctx, pause/2+rand.N(pause/2+1))
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	for ready.Load() < int64(watchers) {
		if time.Since(t0) > 5*time.Minute {
			return res, fmt.Errorf("only %d of %d watches in place after 5 minutes", ready.Load(), watchers)
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return res, ctx.Err()
		}
	}
	res.ReadyS = time.Since(t0).Seconds()
	sleepCtx(ctx, 2*time.Second) // let the servers settle before reading their memory
	watching := h.snapServers()
	for i := range h.servers {
		res.ServerRSSBeforeMB = append(res.ServerRSSBeforeMB, mb(before[i].RSSBytes))
		res.ServerRSSWatchMB = append(res.ServerRSSWatchMB, mb(watching[i].RSSBytes))
		res.RSSPerWatcherBytes += float64(watching[i].RSSBytes-before[i].RSSBytes) / float64(watchers)
	}

	s, err := h.b.NewSession(ctx)
	if err != nil {
		return res, fmt.Errorf("watch: session: %w", err)
	}
	defer s.Close(context.Background())
	lock := prefix + "l"
	acked := make([]int64, changes)
	cpu0 := h.snapServers()
	for k := range changes {
		var err error
		if k%2 == 0 {
			_, err = s.Acquire(ctx, lock)
		} else {
			err = s.Release(ctx, lock)
		}
		if err != nil {
			return res, fmt.Errorf("watch: change %d: %w", k+1, err)
		}
		acked[k] = int64(time.Since(t0))
		select {
		case <-done[k]:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	cpu1 := h.snapServers()
	var ticks uint64
	for i := range h.servers {
		ticks += cpu1[i].CPUTicks - cpu0[i].CPUTicks
	}
	res.ServerCPUPerChangeS = float64(ticks) / clkTck / float64(changes)
	var lastD, halfD []time.Duration
	for k := range changes {
		res.Missed += watchers - int(min(told[k].Load(), int64(watchers)))
		if l := last[k].Load(); l > 0 {
			lastD = append(lastD, time.Duration(max(l-acked[k], 0)))
		}
		if m := half[k].Load(); m > 0 {
			halfD = append(halfD, time.Duration(max(m-acked[k], 0)))
		}
	}
	res.LastTold, res.MedianTold = stats.Summarize(lastD), stats.Summarize(halfD)
	res.Errors = int(errs.Load())
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	return res, nil
}

// snapServers reads every server process's RSS and CPU; one that cannot be read reads as 0.
func (h *harness) snapServers() []procSnap {
	out := make([]procSnap, len(h.servers))
	for i, s := range h.servers {
		out[i], _ = readProc(s.PID)
	}
	return out
}

// watchPrefix: one clientv3 Watch on the prefix (under /lockbench/, where the sessions' mutexes
// keep their keys), on connection w of the pool.
func (b *etcdBackend) watchPrefix(ctx context.Context, w int, prefix string, ready func(), told func(n int)) error {
	c, err := b.client(w % len(b.clients))
	if err != nil {
		return err
	}
	for resp := range c.Watch(ctx, "/lockbench/"+prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify()) {
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Created {
			ready()
		}
		if n := len(resp.Events); n > 0 {
			told(n)
		}
	}
	return ctx.Err()
}

// watchClient is the HTTP client of the streams: one connection per stream, no timeout.
var (
	watchClientOnce sync.Once
	watchClient     *http.Client
)

// watchPrefix: one streamed watch of the prefix (Server-Sent Events) on endpoint w mod n,
// from the index of the last event it got when it opens again.
func (b *httpBackend) watchPrefix(ctx context.Context, w int, prefix string, ready func(), told func(n int)) error {
	watchClientOnce.Do(func() { watchClient = newHTTPClient(0) })
	ep := b.endpoints[w%len(b.endpoints)]
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ep.base+"/v1/locks?prefix="+url.QueryEscape(prefix)+"&index=0", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := watchClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return parseHTTPError("watch @"+ep.addr, resp, body)
	}
	ready()
	rd := bufio.NewReaderSize(resp.Body, 4096)
	var name string
	for {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("watch @" + ep.addr + ": the stream ended")
			}
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case bytes.HasPrefix(line, []byte("event: ")):
			name = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			data := line[len("data: "):]
			switch name {
			case "change":
				var e struct {
					Locks []json.RawMessage `json:"locks"`
				}
				if err := json.Unmarshal(data, &e); err != nil {
					return fmt.Errorf("watch @%s: a change event: %w", ep.addr, err)
				}
				told(len(e.Locks))
			case "end":
				return fmt.Errorf("watch @%s: the stream ended: %s", ep.addr, data)
			}
		}
	}
}
