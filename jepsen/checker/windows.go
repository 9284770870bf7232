package checker

import (
	"sort"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// holdWindows are, per lock and session, the intervals in which the session may have held the
// lock: from the invocation of an acquire that may have granted it (ok or unknown) to the
// completion of the next definite release (ok, not_holder, session_not_found) or cancel that
// found the lock not held (after it, a cancelled attempt takes no effect), or to the session's
// last op. A renewal outside every window of a lock says nothing that lock's
// linearizability depends on, so its partition can leave it out: dropping ops from a history
// never turns a linearizable history into a non-linearizable one.
type holdWindows map[string]map[string][][2]int64

func newHoldWindows(ops []history.Op) holdWindows {
	sorted := append([]history.Op(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Invoke < sorted[j].Invoke })
	end := map[string]int64{} // session -> completion of its last op
	for _, op := range sorted {
		if op.Session != "" && op.Complete > end[op.Session] {
			end[op.Session] = op.Complete
		}
	}
	type key struct{ lock, session string }
	open := map[key]int64{}
	w := holdWindows{}
	add := func(k key, from, to int64) {
		if w[k.lock] == nil {
			w[k.lock] = map[string][][2]int64{}
		}
		w[k.lock][k.session] = append(w[k.lock][k.session], [2]int64{from, to})
	}
	for _, op := range sorted {
		if op.Session == "" || op.Lock == "" {
			continue
		}
		k := key{op.Lock, op.Session}
		from, isOpen := open[k]
		switch {
		case op.Kind == history.Acquire && (op.Type == history.OK || op.Type == history.Info):
			if !isOpen {
				open[k] = op.Invoke
			}
		case op.Kind == history.Release && isOpen && (op.Type == history.OK ||
			op.Code == api.CodeNotHolder || op.Code == api.CodeSessionNotFound):
			add(k, from, op.Complete)
			delete(open, k)
		case op.Kind == history.Cancel && isOpen && (op.Type == history.OK && !op.Held ||
			op.Code == api.CodeSessionNotFound):
			add(k, from, op.Complete)
			delete(open, k)
		}
	}
	for k, from := range open {
		add(k, from, end[k.session])
	}
	return w
}

// covers reports whether [from, to] meets a window of the session on the lock.
func (w holdWindows) covers(lock, session string, from, to int64) bool {
	for _, iv := range w[lock][session] {
		if from <= iv[1] && iv[0] <= to {
			return true
		}
	}
	return false
}
