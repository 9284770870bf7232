package checker

import (
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// Sessions of the synthetic semaphore and read/write-lock histories.
const (
	k1 = "eeeeeeee111111111111111111111111"
	k2 = "eeeeeeee222222222222222222222222"
	k3 = "eeeeeeee333333333333333333333333"
)

// kindGrant is a call that took a hold of lock under tok, and the belief that followed, from
// comp to end.
func (b *syn) kindGrant(s, lock, api string, limit int, tok uint64, inv, comp, end int64) *syn {
	b.add(history.Op{Kind: history.HoldWait, Session: s, Lock: lock, API: api, Limit: limit, OutToken: tok}, inv, comp)
	return b.add(history.Op{Kind: history.Hold, Session: s, Lock: lock, API: api, Limit: limit, OutToken: tok}, comp, end)
}

// access is the resource's answer to an access under tok; stale marks one made after a pause.
func (b *syn) access(s, lock, api string, limit int, tok uint64, accepted, stale bool, at int64) *syn {
	op := history.Op{Kind: history.HoldAccess, Session: s, Lock: lock, API: api, Limit: limit, Token: tok}
	if !accepted {
		op.Type = history.Fail
	}
	if stale {
		op.Detail = "stale"
	}
	return b.add(op, at, at)
}

// writerWait is a writer's call that waited wait and ended at comp without the lock.
func (b *syn) writerWait(s, lock string, wait time.Duration, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.HoldWait, Type: history.Info, Session: s, Lock: lock, API: history.APIExclusive,
		WaitNS: int64(wait)}, inv, comp)
}

func semaphoreCheck(b *syn) func() Result {
	return func() Result { return CheckSemaphores(b.ops, DefaultConfig(2*time.Second)) }
}

func rwCheck(b *syn) func() Result {
	cfg := DefaultConfig(2 * time.Second)
	return func() Result { return CheckRWLocks(b.ops, cfg) }
}

func kindCases() []Case {
	const sem, rw, p, sh, ex = "sem", "rw", history.APIPermit, history.APIShared, history.APIExclusive
	return []Case{
		{"semaphore: two of a limit of 2 at once, a third after, writes by each", true, semaphoreCheck((&syn{}).
			kindGrant(k1, sem, p, 2, 5, 0, 10, 100).kindGrant(k2, sem, p, 2, 6, 0, 20, 120).kindGrant(k3, sem, p, 2, 9, 0, 110, 200).
			access(k1, sem, p, 2, 5, true, false, 30).access(k2, sem, p, 2, 6, true, false, 40).access(k1, sem, p, 2, 5, true, false, 50).
			access(k3, sem, p, 2, 9, true, false, 130).access(k2, sem, p, 2, 6, true, false, 140))},
		{"semaphore: three believe they hold a limit of 2 at once", false, semaphoreCheck((&syn{}).
			kindGrant(k1, sem, p, 2, 5, 0, 10, 100).kindGrant(k2, sem, p, 2, 6, 0, 20, 100).kindGrant(k3, sem, p, 2, 9, 0, 30, 100))},
		{"semaphore: two beliefs under one token", false, semaphoreCheck((&syn{}).
			kindGrant(k1, sem, p, 2, 5, 0, 10, 100).kindGrant(k2, sem, p, 2, 5, 0, 20, 120))},
		{"semaphore: the resource accepts a third writer of a limit of 2 (a paused holder's stale write)", false, semaphoreCheck((&syn{}).
			kindGrant(k1, sem, p, 2, 5, 0, 10, 20).kindGrant(k2, sem, p, 2, 6, 0, 30, 200).kindGrant(k3, sem, p, 2, 9, 0, 40, 200).
			access(k1, sem, p, 2, 5, true, false, 15).access(k2, sem, p, 2, 6, true, false, 50).access(k3, sem, p, 2, 9, true, false, 60).
			access(k1, sem, p, 2, 5, true, true, 70))},
		{"semaphore: the same stale write refused", true, semaphoreCheck((&syn{}).
			kindGrant(k1, sem, p, 2, 5, 0, 10, 20).kindGrant(k2, sem, p, 2, 6, 0, 30, 200).kindGrant(k3, sem, p, 2, 9, 0, 40, 200).
			access(k1, sem, p, 2, 5, true, false, 15).access(k2, sem, p, 2, 6, true, false, 50).access(k3, sem, p, 2, 9, true, false, 60).
			access(k1, sem, p, 2, 5, false, true, 70))},
		{"semaphore: the resource accepts a token nobody was granted", false, semaphoreCheck((&syn{}).
			kindGrant(k1, sem, p, 2, 5, 0, 10, 100).access(k2, sem, p, 2, 7, true, false, 50))},

		{"rwlock: readers overlap, then a writer alone, then readers", true, rwCheck((&syn{}).
			kindGrant(k1, rw, sh, 0, 5, 0, 10, 100).kindGrant(k2, rw, sh, 0, 6, 0, 20, 110).
			access(k1, rw, sh, 0, 5, true, false, 30).access(k2, rw, sh, 0, 6, true, false, 40).access(k1, rw, sh, 0, 5, true, false, 50).
			kindGrant(k3, rw, ex, 0, 9, 0, 120, 200).access(k3, rw, ex, 0, 9, true, false, 130).access(k3, rw, ex, 0, 9, true, false, 140).
			kindGrant(k1, rw, sh, 0, 12, 150, 210, 300).access(k1, rw, sh, 0, 12, true, false, 220))},
		{"rwlock: a writer believes it holds the lock beside a reader", false, rwCheck((&syn{}).
			kindGrant(k1, rw, sh, 0, 5, 0, 10, 100).kindGrant(k3, rw, ex, 0, 9, 0, 50, 200))},
		{"rwlock: the resource accepts a stale reader between a writer's writes", false, rwCheck((&syn{}).
			kindGrant(k1, rw, sh, 0, 5, 0, 10, 20).kindGrant(k3, rw, ex, 0, 9, 0, 30, 200).
			access(k1, rw, sh, 0, 5, true, false, 15).access(k3, rw, ex, 0, 9, true, false, 40).
			access(k1, rw, sh, 0, 5, true, true, 50).access(k3, rw, ex, 0, 9, true, false, 60))},
		{"rwlock: the same stale read refused", true, rwCheck((&syn{}).
			kindGrant(k1, rw, sh, 0, 5, 0, 10, 20).kindGrant(k3, rw, ex, 0, 9, 0, 30, 200).
			access(k1, rw, sh, 0, 5, true, false, 15).access(k3, rw, ex, 0, 9, true, false, 40).
			access(k1, rw, sh, 0, 5, false, true, 50).access(k3, rw, ex, 0, 9, true, false, 60))},
		{"rwlock: two beliefs under one token", false, rwCheck((&syn{}).
			kindGrant(k1, rw, sh, 0, 5, 0, 10, 100).kindGrant(k2, rw, sh, 0, 5, 0, 20, 120))},
		{"rwlock: a writer starves behind readers, away from faults", false, rwCheck((&syn{}).
			kindGrant(k1, rw, sh, 0, 5, 0, 10, 9000).kindGrant(k2, rw, sh, 0, 6, 5000, 8000, 16000).
			kindGrant(k1, rw, sh, 0, 8, 8990, 9000, 20000).writerWait(k3, rw, 15*time.Second, 100, 15100))},
		{"rwlock: a writer that waits out a cluster fault", true, rwCheck((&syn{}).
			kindGrant(k1, rw, sh, 0, 5, 0, 10, 9000).writerWait(k3, rw, 15*time.Second, 100, 15100).
			add(history.Op{Kind: history.Nemesis, Fault: "kill", Action: history.ActionStart, FaultID: 1}, 5000, 5000).
			add(history.Op{Kind: history.Nemesis, Fault: "kill", Action: history.ActionStop, FaultID: 1}, 9000, 9000))},
	}
}
