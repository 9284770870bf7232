package checker

import "github.com/raftlock/raftlock/jepsen/history"

// Watcher processes of the synthetic histories.
const (
	pw1 = 100
	pw2 = 101
)

// watchChange is a change watcher p received in the answer to its request from index from.
type watchChange struct {
	lock         string
	index        uint64 // the change's (modify_index)
	holder       string // "" for free
	token        uint64
	from         uint64
	inv, comp    int64
	reset, ended bool
}

func (b *syn) watchOp(p int, c watchChange) *syn {
	op := history.Op{Kind: history.WatchChange, Process: p, Lock: c.lock, Held: c.holder != "", OutSession: c.holder,
		OutToken: c.token, OutIndex: c.index, Index: c.from}
	if c.reset {
		op.Detail = "reset"
	}
	return b.add(op, c.inv, c.comp)
}

// watchReset is a reset answer to watcher p's request from index from, going on from to.
func (b *syn) watchReset(p int, from, to uint64, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.WatchReset, Process: p, Index: from, OutIndex: to}, inv, comp)
}

// watchEnd is watcher p's end: it reached index, read at inv (ok), or did not (info).
func (b *syn) watchEnd(p int, index uint64, ok bool, inv, comp int64) *syn {
	op := history.Op{Kind: history.WatchEnd, Process: p, OutIndex: index}
	if !ok {
		op.Type, op.Error = history.Info, "index 9, short of 12"
	}
	return b.add(op, inv, comp)
}

// watched is a history of two locks and two watchers: s1 holds "a" under 5 and releases it
// (index 7), s2 takes it under 9; Go-client session c1 takes "b" under 11 and unlocks it
// (index 12). Watcher pw1 gets every change, as edit leaves them; pw2 gets a reset from 5 to
// 10 (listing "a" held by s2 under 9), then b's changes. Both reach index 12 after the
// workload.
func watched(edit func([]watchChange) []watchChange) *syn {
	b := (&syn{}).create(s1, 0, 1).create(s2, 0, 1).clientSession(c1, 0, 1).
		watchReset(pw1, 0, 3, 0, 4).watchReset(pw2, 0, 3, 0, 4).
		acquire(s1, "a", 5, 10, 20).release(s1, "a", 5, history.OK, 50, 60).
		acquire(s2, "a", 9, 70, 80).
		clientLock(c1, "b", 11, 81, 85).clientRelease(c1, "b", 11, history.OK, 90, 95)
	changes := []watchChange{
		{lock: "a", index: 5, holder: s1, token: 5, from: 3, inv: 5, comp: 22},
		{lock: "a", index: 7, from: 5, inv: 22, comp: 62},
		{lock: "a", index: 9, holder: s2, token: 9, from: 7, inv: 62, comp: 82},
		{lock: "b", index: 11, holder: c1, token: 11, from: 9, inv: 82, comp: 87},
		{lock: "b", index: 12, from: 11, inv: 87, comp: 97},
	}
	if edit != nil {
		changes = edit(changes)
	}
	for _, c := range changes {
		b.watchOp(pw1, c)
	}
	b.watchOp(pw2, watchChange{lock: "a", index: 5, holder: s1, token: 5, from: 3, inv: 5, comp: 23}).
		watchReset(pw2, 5, 10, 62, 83).
		watchOp(pw2, watchChange{lock: "a", index: 9, holder: s2, token: 9, from: 5, inv: 62, comp: 83, reset: true}).
		watchOp(pw2, watchChange{lock: "b", index: 11, holder: c1, token: 11, from: 10, inv: 83, comp: 88}).
		watchOp(pw2, watchChange{lock: "b", index: 12, from: 11, inv: 88, comp: 98})
	return b.watchEnd(pw1, 12, true, 100, 110).watchEnd(pw2, 12, true, 100, 111)
}

func watchCases() []Case {
	without := func(i int) func([]watchChange) []watchChange {
		return func(c []watchChange) []watchChange { return append(c[:i:i], c[i+1:]...) }
	}
	return []Case{
		{"watch: every change reaches both watchers, one through a reset", true, with(watched(nil), CheckWatch)},
		{"watch: a grant acknowledged after the watchers stopped is not owed", true, with(watched(nil).
			acquire(s1, "c", 30, 120, 130), CheckWatch)},
		{"watch: a watcher never told of a grant", false, with(watched(without(2)), CheckWatch)},
		{"watch: a watcher never told that a hold ended", false, with(watched(without(4)), CheckWatch)},
		{"watch: a change delivered after a later one", false, with(watched(func(c []watchChange) []watchChange {
			c[1], c[2] = c[2], c[1]
			c[1].from, c[1].inv, c[2].from = 5, 22, 5
			return c
		}), CheckWatch)},
		{"watch: a change at the index asked from", false, with(watched(func(c []watchChange) []watchChange {
			c[4].from = 12
			return c
		}), CheckWatch)},
		{"watch: a grant shown to another session than the history's", false, with(watched(func(c []watchChange) []watchChange {
			c[2].holder = s1
			return c
		}), CheckWatch)},
		{"watch: a watcher that did not catch up after the faults healed", false, with(watched(nil).
			watchEnd(pw1+2, 12, false, 100, 60100), CheckWatch)},
	}
}

// observeCases judge the vacancies an observer is told of (Election.Observe), which belief
// takes as server answers showing the lock free.
func observeCases() []Case {
	vacancy := history.Op{Kind: history.Observe, Process: 50, Lock: "a"}
	return []Case{
		{"belief: an observer told of a vacancy between two leaders", true, with(clientHandover().
			add(vacancy, 100, 125), CheckBelief)},
		{"belief: an observer told of a vacancy inside a belief", false, with(clientHandover().
			add(vacancy, 150, 160), CheckBelief)},
	}
}
