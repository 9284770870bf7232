package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"peerbench/internal/stats"
)

// ---- d. linearizable reads --------------------------------------------------
//
// C clients each read one lock in a loop, linearizably, through one chosen server: the leader,
// a follower, or spread over every server. etcd: a Get (linearizable by default, ReadIndex on
// a follower); raftlock: GET /v1/locks/{name}. Nothing is written meanwhile, so the figure is
// what a read costs where it lands, not how it waits for writes. It runs only when asked
// (-reads), and changes nothing of how the lock workloads measure.

// Reader is a backend that reads a lock linearizably through one server of its choice.
type Reader interface {
	// ReadTargets returns how many servers may be read through (endpoints in the order
	// given) and the index of the leader among them (-1 if unknown).
	ReadTargets(ctx context.Context) (n, leader int, err error)
	// NewReader returns a function that reads the named lock linearizably through server
	// node, on connections of its own, and a function that closes them.
	NewReader(ctx context.Context, node int) (read func(ctx context.Context, name string) error, closeFn func(), err error)
}

// ReadResult is one run of the read workload.
type ReadResult struct {
	Clients    int           `json:"clients"`
	At         string        `json:"at"` // leader, follower or spread
	Nodes      []int         `json:"nodes"`
	Ops        int           `json:"ops"`
	OpsPerSec  float64       `json:"ops_per_s"`
	Latency    stats.Summary `json:"read_latency"`
	Errors     int           `json:"errors"`
	FirstError string        `json:"first_error,omitempty"`
	CPU        CPUReport     `json:"cpu"`
}

// readNodes returns the servers the clients of a read run go through, by at: the leader, the
// first follower after it, or every server.
func readNodes(n, leader int, at string) ([]int, error) {
	switch at {
	case "leader":
		if leader < 0 {
			return nil, fmt.Errorf("no leader known")
		}
		return []int{leader}, nil
	case "follower":
		if leader < 0 || n < 2 {
			return nil, fmt.Errorf("no follower known (leader %d of %d)", leader, n)
		}
		return []int{(leader + 1) % n}, nil
	case "spread":
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	return nil, fmt.Errorf("read target %q: want leader, follower or spread", at)
}

func (h *harness) reads(ctx context.Context, clients int, at string) (ReadResult, error) {
	res := ReadResult{Clients: clients, At: at}
	r, ok := h.b.(Reader)
	if !ok {
		return res, fmt.Errorf("backend %s has no read workload", h.b.Name())
	}
	n, leader, err := r.ReadTargets(ctx)
	if err != nil {
		return res, err
	}
	if res.Nodes, err = readNodes(n, leader, at); err != nil {
		return res, err
	}
	readers := make([]func(context.Context, string) error, clients)
	for i := range readers {
		read, closeFn, err := r.NewReader(ctx, res.Nodes[i%len(res.Nodes)])
		if err != nil {
			return res, err
		}
		defer closeFn()
		readers[i] = read
	}
	name := fmt.Sprintf("%s-read", h.runID)
	w := h.newWindow()
	cpuCh := h.measureCPU(w)
	lat := make([][]time.Duration, clients)
	var errs errCount
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if !t0.Before(w.end) || ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := readers[i](rctx, name)
				cancel()
				t1 := time.Now()
				if err != nil {
					errs.add(err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				if !t0.Before(w.warmEnd) && !t1.After(w.end) {
					lat[i] = append(lat[i], t1.Sub(t0))
				}
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	for i := range lat {
		all = append(all, lat[i]...)
	}
	res.Ops = len(all)
	res.OpsPerSec = stats.Round3(float64(res.Ops) / h.dur.Seconds())
	res.Latency = stats.Summarize(all)
	res.Errors, res.FirstError = errs.get()
	res.CPU = cpuReport(<-cpuCh, res.Ops)
	return res, nil
}

// ---- raftlock ------------------------------------------------------------------

// ReadTargets: the endpoints as given, and the leader's among them.
func (b *httpBackend) ReadTargets(ctx context.Context) (int, int, error) {
	ci, err := b.cluster(ctx)
	if err != nil {
		return len(b.endpoints), -1, err
	}
	leader, err := b.leaderIndex(ci)
	if err != nil {
		return len(b.endpoints), -1, err
	}
	return len(b.endpoints), leader, nil
}

// NewReader reads with GET /v1/locks/{name} (linearizable by default) through endpoint node.
func (b *httpBackend) NewReader(_ context.Context, node int) (func(context.Context, string) error, func(), error) {
	if node < 0 || node >= len(b.endpoints) {
		return nil, nil, fmt.Errorf("http: no endpoint %d", node)
	}
	ep := b.endpoints[node]
	hc := newHTTPClient(1)
	read := func(ctx context.Context, name string) error {
		return b.call(ctx, hc, "read @"+ep.addr, "GET", ep.base+httpLockPath(name), nil, nil, httpRequestTimeout)
	}
	return read, hc.CloseIdleConnections, nil
}

// ---- etcd --------------------------------------------------------------------

// ReadTargets: the endpoints as given, and the leader's among them.
func (b *etcdBackend) ReadTargets(ctx context.Context) (int, int, error) {
	_, leader, err := b.Servers(ctx)
	return len(b.cfg.Endpoints), leader, err
}

// NewReader reads with a linearizable Get of the lock's key through endpoint node only (a
// client that dials that one endpoint).
func (b *etcdBackend) NewReader(_ context.Context, node int) (func(context.Context, string) error, func(), error) {
	if node < 0 || node >= len(b.cfg.Endpoints) {
		return nil, nil, fmt.Errorf("etcd: no endpoint %d", node)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{b.cfg.Endpoints[node]}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	read := func(ctx context.Context, name string) error {
		_, err := c.Get(ctx, "/lockbench/"+strings.TrimPrefix(name, "/"))
		return err
	}
	return read, func() { c.Close() }, nil
}
