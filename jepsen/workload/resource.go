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

	mu      sync.Mutex
	highest map[string]uint64
	values  map[string]string
}

// NewResource returns a fenced resource; with ignoreTokens it accepts every write.
func NewResource(rec *history.Recorder, ignoreTokens bool) *Resource {
	return &Resource{rec: rec, ignoreTokens: ignoreTokens, highest: map[string]uint64{}, values: map[string]string{}}
}

// Write stores value for lock under token if the token is not stale, and reports whether it did.
func (r *Resource) Write(process int, lock, session string, token uint64, value string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	inv := r.rec.Now()
	ok := r.ignoreTokens || token >= r.highest[lock]
	if ok {
		r.values[lock] = value
		if token > r.highest[lock] {
			r.highest[lock] = token
		}
	}
	typ := history.OK
	if !ok {
		typ = history.Fail
	}
	r.rec.Add(history.Op{Process: process, Kind: history.Write, Type: typ, Invoke: inv, Lock: lock,
		Session: session, Token: token, OutToken: r.highest[lock]})
	return ok
}
