package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/api"
)

// WatchResult holds the figures of the watch workload: Watchers prefix watches spread over
// the nodes, told of Changes lock changes made one at a time.
type WatchResult struct {
	// Mode is how the watchers watch: "poll" (blocking queries, one request per change) or
	// "stream" (Server-Sent Events, one request in all).
	Mode        string `json:"mode"`
	Watchers    int    `json:"watchers"`
	Consistency string `json:"consistency"`
	Changes     int    `json:"changes"`
	// Prefixes is the number of prefixes each stream watches (every change falls under one of
	// them, and every stream watches them all); Watchings is Watchers × Prefixes.
	Prefixes  int `json:"prefixes,omitempty"`
	Watchings int `json:"watchings,omitempty"`
	// Dropped counts the streams a node ended because they fell behind (a reset without the
	// state); it must be 0.
	Dropped int `json:"dropped,omitempty"`
	// AcquireBefore is another client's uncontended acquire+release rate (one client, pairs
	// per second) before the streams connected, AcquireWatching the same while every stream
	// waited and nothing changed.
	AcquireBefore   *float64 `json:"acquire_per_s_before,omitempty"`
	AcquireWatching *float64 `json:"acquire_per_s_watching,omitempty"`
	// ConnectSeconds is the time until every watcher waited on a node.
	ConnectSeconds float64 `json:"connect_s"`
	// Last is, over the changes, the time from a change's acknowledgment to the moment the last
	// watcher received it; Median to the moment half of them had, First to the first.
	First  Latency `json:"first"`
	Median Latency `json:"median"`
	Last   Latency `json:"last"`
	// Missed counts the deliveries that never came within 30s; OutOfOrder the changes a
	// watcher got after a later one; Resets the answers that told a watcher to take the whole
	// prefix (none should come in a run: every watcher keeps up). All must be 0.
	Missed     int `json:"missed"`
	OutOfOrder int `json:"out_of_order"`
	Resets     int `json:"resets"`
	// Errors counts failed watch requests (each is asked again).
	Errors       int      `json:"errors"`
	ErrorSamples []string `json:"error_samples,omitempty"`
	// IdleCPUPercent is the servers' CPU (all nodes, percent of one core) while every watcher
	// waited and nothing changed, BaseCPUPercent the same before the watchers connected;
	// CPUPerChangeMs their CPU per change, from the first change until every watcher waited
	// again after the last.
	IdleCPUPercent *float64 `json:"idle_cpu_percent,omitempty"`
	BaseCPUPercent *float64 `json:"base_cpu_percent,omitempty"`
	CPUPerChangeMs *float64 `json:"cpu_per_change_ms,omitempty"`
	// Nodes are each node's memory without the watchers and with them waiting.
	Nodes []WatchNode `json:"nodes"`
	// StealPercent is the machine's CPU time stolen by the hypervisor during the workload.
	StealPercent *float64 `json:"steal_percent,omitempty"`
}

// WatchNode is one node's memory and goroutines before the watchers connected and while they
// all waited, from its /metrics.
type WatchNode struct {
	Endpoint        string  `json:"endpoint"`
	Leader          bool    `json:"leader"`
	RSSBefore       float64 `json:"rss_before_bytes"`
	RSSWatching     float64 `json:"rss_watching_bytes"`
	HeapBefore      float64 `json:"heap_before_bytes"`
	HeapWatching    float64 `json:"heap_watching_bytes"`
	GoroutinesAfter float64 `json:"goroutines_watching"`
	CPUChanges      float64 `json:"cpu_changes_s"`
}

// watchRun is one run of the watch workload.
type watchRun struct {
	r       *runner
	nodes   []string // base URLs, the leader's first
	prefix  string
	query   string // the consistency parameter, if any
	hc      *http.Client
	start   time.Time
	changes int

	// told[k][w] is when watcher w received change k (ns after start, 0 if not yet); count[k]
	// how many have, and done[k] is closed when all have.
	told  [][]int64
	count []atomic.Int64
	done  []chan struct{}

	// asking counts the watchers whose request is on its way or waiting; with streams, the
	// streams open.
	asking                              atomic.Int64
	outOfOrder, resets, errors, dropped atomic.Int64
	// stream says the watchers hold streams; prefixes are the prefixes of each.
	stream       bool
	prefixes     []string
	opening      chan struct{} // a place for each stream being opened
	mu           sync.Mutex
	errorSamples []string
}

// watch runs the watch workload: it connects the watchers, measures the cluster idle with
// them waiting, then makes the changes one at a time (an acquire or a release of one lock
// under the prefix), each once every watcher is waiting again, and times their delivery.
func (r *runner) watch(ctx context.Context, mode string) (WatchResult, error) {
	res := WatchResult{Mode: mode, Watchers: r.opts.Watchers, Changes: r.opts.WatchChanges, Consistency: "linearizable"}
	wr := &watchRun{r: r, prefix: r.lockName("watch-"+mode) + "/", changes: r.opts.WatchChanges, start: time.Now(), stream: mode == WatchStream}
	wr.prefixes = []string{wr.prefix}
	wr.opening = make(chan struct{}, maxOpening)
	if wr.stream {
		res.Prefixes = r.opts.WatchPrefixes
		res.Watchings = r.opts.Watchers * r.opts.WatchPrefixes
		if r.opts.WatchPrefixes > 1 {
			wr.prefixes = wr.prefixes[:0]
			for j := range r.opts.WatchPrefixes {
				wr.prefixes = append(wr.prefixes, fmt.Sprintf("%s%03d/", wr.prefix, j))
			}
		}
	}
	if r.opts.WatchStale {
		res.Consistency, wr.query = "stale", "&consistency=stale"
	}
	wr.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: r.opts.TLS, MaxIdleConnsPerHost: r.opts.Watchers + 16,
		DisableCompression: true}}
	defer wr.hc.CloseIdleConnections()
	var err error
	if wr.nodes, err = r.members(ctx); err != nil {
		return res, err
	}
	cpuNodes := wr.nodes
	if r.opts.Dev != nil {
		cpuNodes = cpuNodes[:1] // the nodes share this process: one /metrics tells its CPU
	}
	if res.BaseCPUPercent, err = r.cpuPercent(ctx, cpuNodes, r.opts.Duration); err != nil {
		return res, err
	}
	if wr.stream {
		if res.AcquireBefore, err = r.acquireRate(ctx); err != nil {
			return res, err
		}
	}
	before := r.nodeMetrics(ctx, wr.nodes)
	wr.told = make([][]int64, wr.changes)
	wr.count = make([]atomic.Int64, wr.changes)
	wr.done = make([]chan struct{}, wr.changes)
	for k := range wr.told {
		wr.told[k] = make([]int64, r.opts.Watchers)
		wr.done[k] = make(chan struct{})
	}
	from, err := wr.startIndex(ctx)
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range r.opts.Watchers {
		wg.Add(1)
		if wr.stream {
			go func() { defer wg.Done(); wr.streamer(wctx, w, from) }()
		} else {
			go func() { defer wg.Done(); wr.watcher(wctx, w, from) }()
		}
	}
	defer func() { cancel(); wg.Wait() }()
	base := blockingSum(before)
	if err := wr.awaitWaiting(ctx, base); err != nil {
		return res, err
	}
	res.ConnectSeconds = time.Since(wr.start).Seconds()
	watching := r.nodeMetrics(ctx, wr.nodes)
	if res.IdleCPUPercent, err = r.cpuPercent(ctx, cpuNodes, r.opts.Duration); err != nil {
		return res, err
	}
	if wr.stream {
		if res.AcquireWatching, err = r.acquireRate(ctx); err != nil {
			return res, err
		}
	}
	cpu1, ok1 := r.serverCPU(ctx, cpuNodes)
	if err := wr.makeChanges(ctx, base, &res); err != nil {
		return res, err
	}
	cpu2, ok2 := r.serverCPU(ctx, cpuNodes)
	after := r.nodeMetrics(ctx, wr.nodes)
	for i, n := range wr.nodes {
		res.Nodes = append(res.Nodes, WatchNode{Endpoint: n, Leader: i == 0, RSSBefore: before[i][metricRSS],
			RSSWatching: watching[i][metricRSS], HeapBefore: before[i][metricHeap], HeapWatching: watching[i][metricHeap],
			GoroutinesAfter: watching[i][metricGoroutines], CPUChanges: after[i][metricCPU] - watching[i][metricCPU]})
	}
	if ok1 && ok2 {
		v := (cpu2 - cpu1) * 1000 / float64(wr.changes)
		res.CPUPerChangeMs = &v
	}
	wr.fill(&res)
	return res, nil
}

// Metrics the watch workload reads besides CPU and RSS.
const (
	metricHeap       = "go_memstats_heap_inuse_bytes"
	metricGoroutines = "go_goroutines"
	metricBlocking   = "raftlock_blocking_queries"
)

// cpuPercent measures the servers' CPU over d, in percent of one core; nil if unknown.
func (r *runner) cpuPercent(ctx context.Context, nodes []string, d time.Duration) (*float64, error) {
	cpu0, ok0 := r.serverCPU(ctx, nodes)
	if !sleep(ctx, d) {
		return nil, ctx.Err()
	}
	cpu1, ok1 := r.serverCPU(ctx, nodes)
	if !ok0 || !ok1 {
		return nil, nil
	}
	v := (cpu1 - cpu0) / d.Seconds() * 100
	return &v, nil
}

// makeChanges makes the changes one at a time and waits for every watcher to receive each,
// then for every watcher to wait again before the next.
func (wr *watchRun) makeChanges(ctx context.Context, base float64, res *WatchResult) error {
	session, err := wr.createSession(ctx)
	if err != nil {
		return err
	}
	defer wr.destroySession(session)
	var token uint64
	acked := make([]int64, wr.changes)
	for k := range wr.changes {
		// An acquire and a release of one lock, then the next lock under the next prefix.
		lock := wr.prefixes[(k/2)%len(wr.prefixes)] + "l"
		var err error
		if k%2 == 0 {
			token, err = wr.change(ctx, session, "/v1/locks/"+lock+"/acquire", api.AcquireRequest{Session: session})
		} else {
			_, err = wr.change(ctx, session, "/v1/locks/"+lock+"/release", api.ReleaseRequest{Session: session, Token: &token})
		}
		if err != nil {
			return fmt.Errorf("bench: watch: change %d: %w", k+1, err)
		}
		acked[k] = int64(time.Since(wr.start))
		select {
		case <-wr.done[k]:
		case <-time.After(30 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := wr.awaitWaiting(ctx, base); err != nil {
			return err
		}
	}
	var first, median, last []time.Duration
	for k := range wr.changes {
		got := slices.DeleteFunc(slices.Clone(wr.told[k]), func(t int64) bool { return t == 0 })
		res.Missed += len(wr.told[k]) - len(got)
		if len(got) == 0 {
			continue
		}
		slices.Sort(got)
		since := func(t int64) time.Duration { return time.Duration(max(t-acked[k], 0)) }
		first = append(first, since(got[0]))
		median = append(median, since(got[len(got)/2]))
		last = append(last, since(got[len(got)-1]))
	}
	res.First, res.Median, res.Last = summarize(first), summarize(median), summarize(last)
	return nil
}

// watcher follows the prefix from index from on one node, recording when each change arrives.
func (wr *watchRun) watcher(ctx context.Context, w int, from uint64) {
	node := wr.nodes[w%len(wr.nodes)]
	index, seen, lastIndex := from, 0, uint64(0)
	for ctx.Err() == nil {
		var ch api.LockChanges
		u := fmt.Sprintf("%s/v1/locks?prefix=%s&index=%d&wait=60s%s", node, url.QueryEscape(wr.prefix), index, wr.query)
		wr.asking.Add(1)
		err := wr.get(ctx, u, &ch)
		wr.asking.Add(-1)
		if err != nil {
			if ctx.Err() == nil {
				wr.fail(err)
				sleep(ctx, 100*time.Millisecond)
			}
			continue
		}
		now := int64(time.Since(wr.start))
		if ch.Reset {
			wr.resets.Add(1) // its count of changes is no longer sound: stop counting
			seen = wr.changes
		}
		for _, l := range ch.Locks {
			if l.ModifyIndex <= lastIndex {
				wr.outOfOrder.Add(1)
			}
			lastIndex = l.ModifyIndex
			if seen < wr.changes {
				wr.told[seen][w] = now
				if wr.count[seen].Add(1) == int64(len(wr.told[seen])) {
					close(wr.done[seen])
				}
			}
			seen++
		}
		index = ch.Index
	}
}

// awaitWaiting waits until the nodes hold every watcher's request (their blocking-query gauges
// sum to base + watchers). It reads the gauges only once every watcher has asked again, and
// then every 100ms, since reading /metrics costs the servers CPU too.
func (wr *watchRun) awaitWaiting(ctx context.Context, base float64) error {
	deadline := time.Now().Add(120 * time.Second)
	for {
		if wr.stream && wr.asking.Load() >= int64(wr.r.opts.Watchers) {
			return nil // a stream counts as open once its node answered with its headers
		}
		if !wr.stream && wr.asking.Load() >= int64(wr.r.opts.Watchers) &&
			blockingSum(wr.r.nodeMetrics(ctx, wr.nodes)) >= base+float64(wr.r.opts.Watchers) {
			return nil
		}
		if time.Now().After(deadline) {
			wr.mu.Lock()
			samples := strings.Join(wr.errorSamples, "; ")
			wr.mu.Unlock()
			return fmt.Errorf("bench: watch: %d of the %d watchers were waiting after 120s (%d failed requests: %s)",
				wr.asking.Load(), wr.r.opts.Watchers, wr.errors.Load(), samples)
		}
		pause := 100 * time.Millisecond
		if wr.asking.Load() < int64(wr.r.opts.Watchers) {
			pause = 5 * time.Millisecond
		}
		if !sleep(ctx, pause) {
			return ctx.Err()
		}
	}
}

// startIndex is the index the watchers start from: that of the whole (empty) prefix.
func (wr *watchRun) startIndex(ctx context.Context) (uint64, error) {
	var ch api.LockChanges
	if err := wr.get(ctx, fmt.Sprintf("%s/v1/locks?prefix=%s&index=0", wr.nodes[0], url.QueryEscape(wr.prefix)), &ch); err != nil {
		return 0, fmt.Errorf("bench: watch: %w", err)
	}
	return ch.Index, nil
}

func (wr *watchRun) createSession(ctx context.Context) (string, error) {
	var s api.Session
	if err := wr.do(ctx, http.MethodPost, wr.nodes[0]+"/v1/sessions", api.CreateSessionRequest{TTL: "5m"}, &s); err != nil {
		return "", fmt.Errorf("bench: watch: %w", err)
	}
	return s.ID, nil
}

// change renews the session, then sends a change, to any node that answers, until it is
// applied: a release whose earlier attempt was applied unseen is answered 409 not_holder, and an
// acquire repeated is answered its grant again. It returns the token answered, if any.
func (wr *watchRun) change(ctx context.Context, session, path string, body any) (uint64, error) {
	var out struct {
		Token uint64 `json:"token"`
	}
	var err error
	for try := 0; try < 50 && ctx.Err() == nil; try++ {
		node := wr.nodes[try%len(wr.nodes)]
		if err = wr.do(ctx, http.MethodPut, node+"/v1/sessions/"+session+"/renew", nil, &struct{}{}); err == nil {
			if err = wr.do(ctx, http.MethodPost, node+path, body, &out); err == nil || strings.Contains(err.Error(), api.CodeNotHolder) {
				return out.Token, nil
			}
		}
		if strings.Contains(err.Error(), api.CodeSessionNotFound) {
			return 0, err
		}
		sleep(ctx, 200*time.Millisecond)
	}
	return 0, err
}

func (wr *watchRun) destroySession(session string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = wr.do(ctx, http.MethodDelete, wr.nodes[0]+"/v1/sessions/"+session, nil, &struct{}{})
}

func (wr *watchRun) get(ctx context.Context, u string, out any) error {
	return wr.do(ctx, http.MethodGet, u, nil, out)
}

func (wr *watchRun) do(ctx context.Context, method, u string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if wr.r.opts.Token != "" {
		req.Header.Set(api.HeaderToken, wr.r.opts.Token)
	}
	resp, err := wr.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, strings.SplitN(u, "?", 2)[0], resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

func (wr *watchRun) fail(err error) {
	wr.errors.Add(1)
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if len(wr.errorSamples) < 5 {
		wr.errorSamples = append(wr.errorSamples, err.Error())
	}
}

func (wr *watchRun) fill(res *WatchResult) {
	res.OutOfOrder, res.Resets, res.Errors = int(wr.outOfOrder.Load()), int(wr.resets.Load()), int(wr.errors.Load())
	res.Dropped = int(wr.dropped.Load())
	wr.mu.Lock()
	res.ErrorSamples = slices.Clone(wr.errorSamples)
	wr.mu.Unlock()
}

// members returns the base URLs of the cluster's members, the leader's first.
func (r *runner) members(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(r.opts.Endpoints[0], "/")+"/v1/cluster", nil)
	if err != nil {
		return nil, err
	}
	if r.opts.Token != "" {
		req.Header.Set(api.HeaderToken, r.opts.Token)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: reading the cluster: %w", err)
	}
	defer resp.Body.Close()
	var cl api.Cluster
	if err := json.NewDecoder(resp.Body).Decode(&cl); err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: reading the cluster: %s %v", resp.Status, err)
	}
	scheme := "http://"
	if strings.HasPrefix(r.opts.Endpoints[0], "https://") {
		scheme = "https://"
	}
	var out []string
	for _, m := range cl.Members {
		switch {
		case m.HTTPAddr == "":
		case m.ID == cl.Leader:
			out = append([]string{scheme + m.HTTPAddr}, out...)
		default:
			out = append(out, scheme+m.HTTPAddr)
		}
	}
	if len(out) == 0 || cl.Leader == "" {
		return nil, errors.New("bench: watch: the cluster has no leader or no published addresses")
	}
	return out, nil
}

// nodeMetrics scrapes every node's /metrics; a node that does not answer reads as empty.
func (r *runner) nodeMetrics(ctx context.Context, nodes []string) []map[string]float64 {
	out := make([]map[string]float64, len(nodes))
	for i, n := range nodes {
		m, err := scrapeMetrics(ctx, r.hc, n)
		if err != nil {
			m = map[string]float64{}
		}
		out[i] = m
	}
	return out
}

func blockingSum(ms []map[string]float64) float64 { return sumOf(ms, metricBlocking) }

func sumOf(ms []map[string]float64, name string) float64 {
	sum := 0.0
	for _, m := range ms {
		sum += m[name]
	}
	return sum
}
