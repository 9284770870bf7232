package checker

import (
	"fmt"
	"sort"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// CheckWatch judges the prefix watchers: every change the history acknowledged reached every
// watcher, in order. A watcher that stopped (history.WatchEnd ok) had reached the index of a
// linearizable answer asked after the workload stopped, so every grant and release
// acknowledged before that was asked is owed to it:
//
//   - each grant (an ok acquire, or an ok Go-client call that took the lock, under token T) as a
//     change of the lock held under T at index T, by the session the grant named, unless a
//     reset the watcher got spans T (it then took the whole prefix instead, and says so);
//   - each release of the hold under T as a later view of the lock (a change, or a reset's
//     listing, where a lock left out is free) that no longer shows it held under T;
//   - the changes in log order: never one at or before the index the watcher asked from, the
//     indexes of its changes never going back, and a lock's own strictly growing;
//   - nothing that contradicts the history: a change showing a grant under T names the session
//     the history saw granted T, and no change shows a token above its own index.
//
// A watcher that could not reach its final index after the faults healed fails the check.
func CheckWatch(ops []history.Op, _ Config) Result {
	res := newResult("watch")
	byProcess := map[int][]history.Op{}
	for _, op := range ops {
		switch op.Kind {
		case history.WatchChange, history.WatchReset, history.WatchEnd:
			byProcess[op.Process] = append(byProcess[op.Process], op)
		}
	}
	if len(byProcess) == 0 {
		res.Figures = "no watchers"
		return res
	}
	acked := ackedChanges(ops)
	var st watchStats
	for _, p := range sortedProcesses(byProcess) {
		w := newWatcherView(byProcess[p])
		w.checkOrder(&res)
		w.checkConsistent(&res, acked)
		w.checkOwed(&res, acked, &st)
		st.changes += w.changes
		st.resets += len(w.resets)
	}
	res.Figures = fmt.Sprintf("%d watchers got %d changes and %d resets; %d grants and %d releases owed to them, %d excused by a reset; slowest delivery %s after its acknowledgment",
		len(byProcess), st.changes, st.resets, st.grants, st.releases, st.excused, st.slowest.Round(time.Millisecond))
	return res
}

type watchStats struct {
	changes, resets, grants, releases, excused int
	slowest                                    time.Duration
}

// ackedGrant is a grant or release the history acknowledged.
type ackedGrant struct {
	lock    string
	token   uint64
	session string // the grantee, when the history names it
	op      history.Op
}

type ackedSet struct {
	grants, releases []ackedGrant
	// session of each lock's grant under a token, where known.
	grantee map[string]map[uint64]string
}

// ackedChanges collects the grants and releases the history acknowledged.
func ackedChanges(ops []history.Op) ackedSet {
	a := ackedSet{grantee: map[string]map[uint64]string{}}
	for _, op := range ops {
		if op.Type != history.OK {
			continue
		}
		switch op.Kind {
		case history.Acquire, history.ClientAcquire:
			if op.OutToken == 0 {
				continue
			}
			s := op.OutSession
			if s == "" {
				s = op.Session
			}
			a.grants = append(a.grants, ackedGrant{op.Lock, op.OutToken, s, op})
			if a.grantee[op.Lock] == nil {
				a.grantee[op.Lock] = map[uint64]string{}
			}
			a.grantee[op.Lock][op.OutToken] = s
		case history.Release, history.ClientRelease:
			a.releases = append(a.releases, ackedGrant{op.Lock, op.Token, op.Session, op})
		}
	}
	return a
}

// watcherView is what one watcher received, in the order it received it.
type watcherView struct {
	process int
	ops     []history.Op
	end     *history.Op
	resets  []watchReset
	changes int
	// views of each lock: index and state, from its changes.
	views map[string][]lockView
	// granted[lock][token] is the change that showed the grant under token at its index.
	granted map[string]map[uint64]history.Op
}

type lockView struct {
	index uint64
	held  bool
	token uint64
}

// watchReset is a reset answer and the locks it listed (any other was free).
type watchReset struct {
	op     history.Op
	listed map[string]lockView
}

func newWatcherView(ops []history.Op) *watcherView {
	sort.Slice(ops, func(i, j int) bool { return ops[i].ID < ops[j].ID })
	w := &watcherView{process: ops[0].Process, ops: ops, views: map[string][]lockView{}, granted: map[string]map[uint64]history.Op{}}
	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind == history.WatchEnd:
			w.end = op
		case op.Kind == history.WatchReset:
			w.resets = append(w.resets, watchReset{op: *op, listed: map[string]lockView{}})
		case op.Detail == "reset":
			if len(w.resets) > 0 {
				w.resets[len(w.resets)-1].listed[op.Lock] = lockView{index: op.OutIndex, held: op.Held, token: op.OutToken}
			}
		default:
			w.changes++
			w.views[op.Lock] = append(w.views[op.Lock], lockView{index: op.OutIndex, held: op.Held, token: op.OutToken})
			if op.Held && op.OutToken == op.OutIndex {
				if w.granted[op.Lock] == nil {
					w.granted[op.Lock] = map[uint64]history.Op{}
				}
				w.granted[op.Lock][op.OutToken] = *op
			}
		}
	}
	return w
}

// checkOrder requires the changes in log order.
func (w *watcherView) checkOrder(res *Result) {
	var last uint64
	lastOf := map[string]uint64{}
	for _, op := range w.ops {
		if op.Kind != history.WatchChange || op.Detail == "reset" {
			continue
		}
		switch {
		case op.OutIndex <= op.Index:
			res.violate("watcher p%d got a change of %s at index %d, at or before the index %d it asked from: %s", w.process, op.Lock, op.OutIndex, op.Index, op)
		case op.OutIndex < last:
			res.violate("watcher p%d got a change at index %d after one at %d: out of order: %s", w.process, op.OutIndex, last, op)
		case op.OutIndex <= lastOf[op.Lock]:
			res.violate("watcher p%d got the change of %s at index %d after the one at %d: %s", w.process, op.Lock, op.OutIndex, lastOf[op.Lock], op)
		}
		last, lastOf[op.Lock] = max(last, op.OutIndex), max(lastOf[op.Lock], op.OutIndex)
	}
}

// checkConsistent requires every change to agree with the grants the history knows.
func (w *watcherView) checkConsistent(res *Result, a ackedSet) {
	for _, op := range w.ops {
		if op.Kind != history.WatchChange || !op.Held {
			continue
		}
		if op.OutToken > op.OutIndex && op.Detail != "reset" {
			res.violate("watcher p%d got %s held under token %d at index %d: a token is the index of its grant: %s", w.process, op.Lock, op.OutToken, op.OutIndex, op)
		}
		if s, ok := a.grantee[op.Lock][op.OutToken]; ok && s != "" && op.OutSession != "" && s != op.OutSession {
			res.violate("watcher p%d got %s held by %s under token %d, which the history granted to %s: %s", w.process, op.Lock, shortID(op.OutSession), op.OutToken, shortID(s), op)
		}
	}
}

// checkOwed requires every grant and release acknowledged before the watcher's end to have
// reached it.
func (w *watcherView) checkOwed(res *Result, a ackedSet, st *watchStats) {
	if w.end == nil || w.end.Type != history.OK {
		why := "it never stopped"
		if w.end != nil {
			why = w.end.Error
		}
		res.violate("watcher p%d did not reach the index of the changes acknowledged before the workload stopped: %s", w.process, why)
		return
	}
	owed := func(g ackedGrant) bool { return g.op.Complete < w.end.Invoke && g.token <= w.end.OutIndex }
	for _, g := range a.grants {
		if !owed(g) {
			continue
		}
		st.grants++
		got, ok := w.granted[g.lock][g.token]
		switch {
		case ok: // checkConsistent judges its session
			st.slowest = max(st.slowest, time.Duration(got.Complete-g.op.Complete))
		case w.excused(g.token):
			st.excused++
		default:
			res.violate("watcher p%d was never told of the grant of %s under token %d (acknowledged at %s: %s)", w.process, g.lock, g.token, secs(g.op.Complete), g.op)
		}
	}
	for _, r := range a.releases {
		if r.op.Complete >= w.end.Invoke {
			continue
		}
		st.releases++
		if !w.sawEnd(r.lock, r.token) {
			res.violate("watcher p%d was never told that the hold of %s under token %d ended (released at %s: %s)", w.process, r.lock, r.token, secs(r.op.Complete), r.op)
		}
	}
}

// excused reports whether a reset the watcher got spans index: it took the whole prefix
// instead of the change at index.
func (w *watcherView) excused(index uint64) bool {
	for _, r := range w.resets {
		if r.op.Index < index && index <= r.op.OutIndex {
			return true
		}
	}
	return false
}

// sawEnd reports whether a view of lock after token — a change, or a reset answered at a
// later index, where a lock it did not list is free — shows it no longer held under token.
func (w *watcherView) sawEnd(lock string, token uint64) bool {
	for _, v := range w.views[lock] {
		if v.index > token && !(v.held && v.token == token) {
			return true
		}
	}
	for _, r := range w.resets {
		if v, ok := r.listed[lock]; r.op.OutIndex > token && !(ok && v.held && v.token == token) {
			return true
		}
	}
	return false
}

func sortedProcesses(m map[int][]history.Op) []int {
	out := make([]int, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}
