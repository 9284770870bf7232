package bench

import (
	"context"
	"time"
)

// cpuMeter measures the CPU time the servers spend during a workload's window, from the
// process_cpu_seconds_total of every member's /metrics, read as the window opens and closes.
type cpuMeter struct {
	done    chan struct{}
	seconds float64
	ok      bool
}

// meterCPU starts measuring the servers' CPU time over w. With an in-process (--dev) cluster the
// nodes share the bench's process, so one node is read and the figure includes the load
// generator.
func (r *runner) meterCPU(ctx context.Context, t *target, w window) *cpuMeter {
	nodes := t.nodes
	if r.opts.Dev != nil && len(nodes) > 1 {
		nodes = nodes[:1]
	}
	m := &cpuMeter{done: make(chan struct{})}
	go func() {
		defer close(m.done)
		if !sleep(ctx, time.Until(w.start)) {
			return
		}
		before, ok := r.serverCPU(ctx, nodes)
		if !ok || !sleep(ctx, time.Until(w.end)) {
			return
		}
		after, ok := r.serverCPU(ctx, nodes)
		m.seconds, m.ok = after-before, ok && after >= before
	}()
	return m
}

// perOp waits for the window to close and returns the servers' CPU microseconds per operation,
// or nil where a node's metrics could not be read or nothing was done.
func (m *cpuMeter) perOp(ops int64) *float64 {
	<-m.done
	if !m.ok || ops <= 0 {
		return nil
	}
	v := m.seconds * 1e6 / float64(ops)
	return &v
}

// serverCPU sums the CPU seconds the nodes' processes have used so far.
func (r *runner) serverCPU(ctx context.Context, nodes []string) (float64, bool) {
	if len(nodes) == 0 {
		return 0, false
	}
	sum := 0.0
	for _, n := range nodes {
		m, err := scrapeMetrics(ctx, r.hc, n)
		if err != nil {
			return 0, false
		}
		v, ok := m[metricCPU]
		if !ok {
			return 0, false
		}
		sum += v
	}
	return sum, true
}
