package proxy

import (
	"fmt"
	"math/rand"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// FaultConfig describes a RequestFault.
type FaultConfig struct {
	// Match selects the requests the fault may act on; nil selects every request.
	Match func(*http.Request) bool
	// Delay is the probability that a selected request is held back before it is delivered.
	Delay float64
	// Duplicate is the probability that a selected request is delivered at once with its
	// answer lost, and delivered again later on a new connection.
	Duplicate float64
	// Min and Max bound how long a request is held back, or how long after it arrived its copy
	// is delivered.
	Min, Max time.Duration
	// Seed fixes the sequence of decisions.
	Seed int64
}

// RequestFault decides, request by request, what the network does to the HTTP requests of the
// proxies it is installed on (HTTPProxy.SetFault), and counts what it did. One fault may be
// installed on many proxies; its decisions come from one seeded sequence, in the order the
// requests arrive.
//
// A request held back reaches its target after the delay: on its own connection if the client
// still waits for it (the client then gets its answer late), else on a new connection whose
// answer goes nowhere. A duplicated request reaches its target at once, but its answer is lost
// (the client's connection, or HTTP/2 stream, is cut, as when the network fails after
// delivering a request), and a copy is delivered again later on a new connection, its answer
// going nowhere. Both are late requests of a call the client may have finished.
type RequestFault struct {
	cfg FaultConfig

	mu  sync.Mutex
	rng *rand.Rand

	delayed, duplicated atomic.Int64
	late, lost          atomic.Int64
}

// NewRequestFault returns a fault with the configuration.
func NewRequestFault(cfg FaultConfig) *RequestFault {
	if cfg.Max < cfg.Min {
		cfg.Max = cfg.Min
	}
	return &RequestFault{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed))}
}

// decide returns how long to hold the request back (0: not at all) and how long after its
// arrival to deliver a copy (0: none).
func (f *RequestFault) decide(r *http.Request) (hold, again time.Duration) {
	if f.cfg.Match != nil && !f.cfg.Match(r) {
		return 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	between := func() time.Duration {
		span := f.cfg.Max - f.cfg.Min
		if span <= 0 {
			return f.cfg.Min
		}
		return f.cfg.Min + time.Duration(f.rng.Int63n(int64(span)))
	}
	switch x := f.rng.Float64(); {
	case x < f.cfg.Duplicate:
		f.duplicated.Add(1)
		return 0, between()
	case x < f.cfg.Duplicate+f.cfg.Delay:
		f.delayed.Add(1)
		return between(), 0
	}
	return 0, 0
}

// FaultCounts are what a RequestFault did.
type FaultCounts struct {
	// Delayed and Duplicated count the requests held back and the requests copied.
	Delayed, Duplicated int64
	// Late counts the requests delivered after their client stopped waiting for them (copies,
	// and held-back requests whose client gave up), whose answers went nowhere.
	Late int64
	// Lost counts the late requests lost to a cut or a failure toward the target.
	Lost int64
}

// String renders the counts for the nemesis log.
func (c FaultCounts) String() string {
	return fmt.Sprintf("requests delayed %d, duplicated %d; late deliveries %d (answers dropped), lost to cuts or errors %d",
		c.Delayed, c.Duplicated, c.Late, c.Lost)
}

// Counts returns what the fault did so far.
func (f *RequestFault) Counts() FaultCounts {
	return FaultCounts{Delayed: f.delayed.Load(), Duplicated: f.duplicated.Load(), Late: f.late.Load(), Lost: f.lost.Load()}
}
