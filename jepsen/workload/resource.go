package workload

import (
	"sync"

	"github.com/raftlock/raftlock/jepsen/history"
)

// Resource is the protected resource: one register per lock that remembers the highest token
// it accepted and rejects writes carrying a lower one. Each write is recorded while the resource
// is locked, so the IDs of write ops give the order the resource saw them in.
type Resource struct {
	rec *history.Recorder
	// ignoreTokens accepts every write: the plain Redis-lock situation the checkers must catch.
	ignoreTokens bool

	mu        sync.Mutex
	highest   map[string]uint64
	values    map[string]string
	unchecked map[string]string // the registers that do not check tokens
}

// NewResource returns a fenced resource; with ignoreTokens it accepts every write.
func NewResource(rec *history.Recorder, ignoreTokens bool) *Resource {
	return &Resource{rec: rec, ignoreTokens: ignoreTokens, highest: map[string]uint64{}, values: map[string]string{},
		unchecked: map[string]string{}}
}

// Write stores value for lock under token if the token is not stale, and reports whether it did.
func (r *Resource) Write(process int, lock, session string, token uint64, value string) bool {
	return r.WriteAt(process, lock, session, token, value, false, -1)
}

// WriteAt is Write by a writer that decided to write at invoke (on the run clock; -1: now),
// possibly some time before. With unchecked the write goes to a register of the lock that
// does not check tokens: it is always accepted, and recorded as Unchecked.
func (r *Resource) WriteAt(process int, lock, session string, token uint64, value string, unchecked bool, invoke int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if invoke < 0 {
		invoke = r.rec.Now()
	}
	ok := unchecked || r.ignoreTokens || token >= r.highest[lock]
	switch {
	case unchecked:
		r.unchecked[lock] = value
	case ok:
		r.values[lock] = value
		if token > r.highest[lock] {
			r.highest[lock] = token
		}
	}
	typ := history.OK
	if !ok {
		typ = history.Fail
	}
	op := history.Op{Process: process, Kind: history.Write, Type: typ, Invoke: invoke, Lock: lock,
		Session: session, Token: token, OutToken: r.highest[lock], Unchecked: unchecked}
	if unchecked {
		op.OutToken = 0
	}
	r.rec.Add(op)
	return ok
}
