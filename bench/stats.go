package bench

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// Latency summarises a set of durations, in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// summarize computes nearest-rank percentiles of ds; it sorts ds in place.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{
		Count: len(ds),
		P50:   ms(percentile(ds, 0.50)),
		P99:   ms(percentile(ds, 0.99)),
		Max:   ms(ds[len(ds)-1]),
		Mean:  ms(sum / time.Duration(len(ds))),
	}
}

// percentile returns the nearest-rank p-quantile of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// window is the measurement interval of a workload: operations that start inside it count.
type window struct {
	start, end time.Time
}

func newWindow(warmup, duration time.Duration) window {
	start := time.Now().Add(warmup)
	return window{start: start, end: start.Add(duration)}
}

// measuring reports whether an operation started at t counts.
func (w window) measuring(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// over reports whether the workload should stop at t.
func (w window) over(t time.Time) bool { return !t.Before(w.end) }

func (w window) seconds() float64 { return w.end.Sub(w.start).Seconds() }

// errorLog counts errors and keeps the first few distinct messages for the report.
type errorLog struct {
	mu      sync.Mutex
	count   int64
	samples []string
}

const maxErrorSamples = 5

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count++
	msg := err.Error()
	if len(l.samples) < maxErrorSamples && !slices.Contains(l.samples, msg) {
		l.samples = append(l.samples, msg)
	}
}

func (l *errorLog) snapshot() (int64, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count, slices.Clone(l.samples)
}

// sleep waits for d or until ctx ends, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
