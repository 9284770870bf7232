package checker

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// maxExamples is how many violations a Result quotes; it still counts them all.
const maxExamples = 5

// Config holds the figures the checkers judge a history against.
type Config struct {
	// TTL is the session TTL the workers used.
	TTL time.Duration
	// ClockRateError is the relative clock-rate difference allowed between the harness and the
	// leader when judging expiry times (0.02 = 2%).
	ClockRateError float64
	// ExpiryBound is how long after TTL a dead holder's lock may take to reach a waiting session
	// when no cluster fault is near (timer firing, one commit, the response).
	ExpiryBound time.Duration
	// Recovery is how long after a cluster fault ends timing guarantees are suspended: a new
	// leader restarts every session timer at the full TTL.
	Recovery time.Duration
	// LivenessBound is the time within which every final acquire must succeed.
	LivenessBound time.Duration
	// LinearizabilityTimeout bounds porcupine's search; a search that times out is inconclusive
	// and reported as a failure, never as a pass. Zero means no bound.
	LinearizabilityTimeout time.Duration
	// ExpectStaleWrites makes Fencing fail when the resource rejected no stale write, for runs
	// whose schedule guarantees client pauses.
	ExpectStaleWrites bool
}

// DefaultConfig is a Config for a run whose sessions have the given TTL.
func DefaultConfig(ttl time.Duration) Config {
	return Config{
		TTL:                    ttl,
		ClockRateError:         0.02,
		ExpiryBound:            2 * time.Second,
		Recovery:               ttl + 5*time.Second,
		LivenessBound:          ttl + 10*time.Second,
		LinearizabilityTimeout: 5 * time.Minute,
	}
}

// Result is the verdict of one checker.
type Result struct {
	// Name identifies the checker.
	Name string
	// Valid is false when the checker found a violation or could not conclude.
	Valid bool
	// Figures summarises what was checked, on one line.
	Figures string
	// Violations counts every violation found.
	Violations int
	// Examples quotes the first few violations with the ops that show them.
	Examples []string
}

func newResult(name string) Result { return Result{Name: name, Valid: true} }

// violate records one violation.
func (r *Result) violate(format string, args ...any) {
	r.Valid = false
	r.Violations++
	if len(r.Examples) < maxExamples {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

// Line renders the result on one line: PASS or FAIL, the name and the figures.
func (r Result) Line() string {
	verdict := "PASS"
	if !r.Valid {
		verdict = "FAIL"
	}
	s := fmt.Sprintf("%s %-16s %s", verdict, r.Name, r.Figures)
	if r.Violations > 0 {
		s += fmt.Sprintf("; %d violation(s)", r.Violations)
	}
	return s
}

// String renders the result with its examples.
func (r Result) String() string {
	var b strings.Builder
	b.WriteString(r.Line())
	for _, e := range r.Examples {
		b.WriteString("\n    ")
		b.WriteString(strings.ReplaceAll(e, "\n", "\n    "))
	}
	return b.String()
}

// okAcquires returns the ok acquires of each lock, ordered by invocation.
func okAcquires(ops []history.Op) map[string][]history.Op {
	out := map[string][]history.Op{}
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Type == history.OK {
			out[op.Lock] = append(out[op.Lock], op)
		}
	}
	for _, l := range out {
		sort.Slice(l, func(i, j int) bool { return l[i].Invoke < l[j].Invoke })
	}
	return out
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// shortID abbreviates a session id.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// secs renders nanoseconds on the run clock as seconds.
func secs(ns int64) string { return fmt.Sprintf("%.3fs", float64(ns)/1e9) }

// clusterFault reports whether a fault disturbs the cluster itself (rather than a client).
func clusterFault(fault string) bool { return fault != FaultClientPause && fault != FaultDelayDup }

// The names of the faults that act on clients, not on the cluster (the checker does not import
// the nemesis).
const (
	// FaultClientPause stops a worker.
	FaultClientPause = "client-pause"
	// FaultDelayDup delays and duplicates the Go-client workers' acquire requests: a request
	// of a call that ended must then be refused, which changes no timing the checkers judge.
	FaultDelayDup = "delay-dup"
	// FaultRestore saves a backup and restores it later: the restore ends every session.
	FaultRestore = "restore"
)
