package checker

import (
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// Case is a small hand-written history with the verdict one checker must reach on it.
type Case struct {
	// Name describes the history.
	Name string
	// Valid is the verdict the checker must reach.
	Valid bool
	// Run runs the checker on the history.
	Run func() Result
}

// Session ids of the synthetic histories; c1 and c2 are sessions of the Go client.
const (
	s1 = "aaaaaaaa111111111111111111111111"
	s2 = "bbbbbbbb222222222222222222222222"
	c1 = "cccccccc111111111111111111111111"
	c2 = "dddddddd222222222222222222222222"
)

// ms converts milliseconds to run-clock nanoseconds.
func ms(v int64) int64 { return v * int64(time.Millisecond) }

// syn builds synthetic ops; times are in milliseconds.
type syn struct{ ops []history.Op }

func (b *syn) add(op history.Op, inv, comp int64) *syn {
	op.ID, op.Invoke, op.Complete = len(b.ops), ms(inv), ms(comp)
	if op.Type == "" {
		op.Type = history.OK
	}
	b.ops = append(b.ops, op)
	return b
}

func (b *syn) create(s string, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.CreateSession, Session: s, TTLNS: int64(2 * time.Second)}, inv, comp)
}

// clientSession is a session created through the Go client, whose requests are not recorded.
func (b *syn) clientSession(s string, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.ClientSession, Session: s, TTLNS: int64(2 * time.Second)}, inv, comp)
}

func (b *syn) acquire(s, lock string, tok uint64, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Acquire, Session: s, Lock: lock, OutSession: s, OutToken: tok}, inv, comp)
}

func (b *syn) waitAcquire(s, lock string, wait time.Duration, tok uint64, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Acquire, Session: s, Lock: lock, WaitNS: int64(wait), OutSession: s, OutToken: tok}, inv, comp)
}

func (b *syn) held(s, lock, holder string, tok uint64, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Acquire, Type: history.Fail, Code: api.CodeLockHeld, Status: 409,
		Session: s, Lock: lock, OutSession: holder, OutToken: tok}, inv, comp)
}

func (b *syn) release(s, lock string, tok uint64, typ history.Type, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Release, Type: typ, Session: s, Lock: lock, Token: tok}, inv, comp)
}

// lostAcquire is an acquire of attempt whose answer was lost.
func (b *syn) lostAcquire(s, lock, attempt string, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Acquire, Type: history.Info, Session: s, Lock: lock, Attempt: attempt}, inv, comp)
}

// cancel is an acknowledged cancel of attempt that found the lock held by s under tok, or,
// with tok 0, not held by s.
func (b *syn) cancel(s, lock, attempt string, tok uint64, inv, comp int64) *syn {
	op := history.Op{Kind: history.Cancel, Session: s, Lock: lock, Attempt: attempt}
	if tok != 0 {
		op.Held, op.OutSession, op.OutToken = true, s, tok
	}
	return b.add(op, inv, comp)
}

func (b *syn) read(lock, holder string, tok uint64, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Read, Lock: lock, Held: holder != "", OutSession: holder, OutToken: tok}, inv, comp)
}

// watch is a blocking read from index, waiting up to wait, that answered holder/tok at out.
func (b *syn) watch(lock string, index uint64, wait time.Duration, holder string, tok, out uint64, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Read, Lock: lock, Index: index, WaitNS: int64(wait), Held: holder != "",
		OutSession: holder, OutToken: tok, OutIndex: out}, inv, comp)
}

func (b *syn) renew(s string, typ history.Type, inv, comp int64) *syn {
	op := history.Op{Kind: history.Renew, Type: typ, Session: s}
	if typ == history.Fail {
		op.Code, op.Status = api.CodeSessionNotFound, 404
	}
	return b.add(op, inv, comp)
}

func (b *syn) destroy(s string, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.Destroy, Session: s}, inv, comp)
}

func (b *syn) write(s, lock string, tok uint64, accepted bool, inv, comp int64) *syn {
	typ := history.OK
	if !accepted {
		typ = history.Fail
	}
	return b.add(history.Op{Kind: history.Write, Type: typ, Session: s, Lock: lock, Token: tok}, inv, comp)
}

func (b *syn) final(s, lock string, tok uint64, ok bool, inv, comp int64) *syn {
	b.add(history.Op{Kind: history.CreateSession, Session: s, Lock: lock, Phase: history.PhaseFinal}, inv, inv+1)
	op := history.Op{Kind: history.Acquire, Session: s, Lock: lock, OutSession: s, OutToken: tok, Phase: history.PhaseFinal}
	if !ok {
		op = history.Op{Kind: history.Acquire, Type: history.Fail, Code: api.CodeLockHeld, Session: s, Lock: lock, Phase: history.PhaseFinal}
	}
	return b.add(op, inv+1, comp)
}

// handover is a correct history: s1 takes "a", writes, releases; s2, refused meanwhile, takes
// it next and writes; s1's late write with its old token is rejected.
func handover() *syn {
	b := &syn{}
	b.create(s1, 0, 5).create(s2, 0, 5).
		acquire(s1, "a", 5, 10, 20).
		held(s2, "a", s1, 5, 25, 30).
		write(s1, "a", 5, true, 31, 32).
		read("a", s1, 5, 33, 40).
		release(s1, "a", 5, history.OK, 50, 60).
		acquire(s2, "a", 9, 70, 80).
		write(s2, "a", 9, true, 81, 82).
		write(s1, "a", 5, false, 83, 84).
		read("a", s2, 9, 90, 100).
		final("cccccccc", "a", 12, true, 200, 300)
	return b
}

func lin(b *syn) func() Result {
	return func() Result {
		return CheckLinearizable(b.ops, DefaultConfig(2*time.Second)).Result
	}
}

func with(b *syn, f func([]history.Op, Config) Result) func() Result {
	return func() Result { return f(b.ops, DefaultConfig(2*time.Second)) }
}

// SyntheticCases returns, for every checker, histories it must pass and histories it must flag.
func SyntheticCases() []Case {
	var cases []Case
	cases = append(cases, linearizableCases()...)
	cases = append(cases, fencingCases()...)
	cases = append(cases, tokenCases()...)
	cases = append(cases, durabilityCases()...)
	cases = append(cases, expiryCases()...)
	cases = append(cases, livenessCases()...)
	cases = append(cases, convergenceCases()...)
	cases = append(cases, beliefCases()...)
	cases = append(cases, heldByNobodyCases()...)
	cases = append(cases, powerCases()...)
	cases = append(cases, watchCases()...)
	cases = append(cases, observeCases()...)
	cases = append(cases, kindCases()...)
	cases = append(cases, operatorCases()...)
	return cases
}

func linearizableCases() []Case {
	return []Case{
		{"linearizable: handover", true, lin(handover())},
		{"linearizable: lost acquire reply learnt by a read, then destroy", true, lin((&syn{}).
			add(history.Op{Kind: history.Acquire, Type: history.Info, Session: s1, Lock: "a"}, 0, 10).
			read("a", s1, 7, 20, 30).destroy(s1, 40, 50).acquire(s2, "a", 9, 60, 70))},
		{"linearizable: holder expires, another takes the lock", true, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).renew(s1, history.OK, 20, 30).acquire(s2, "a", 9, 3000, 3010).
			renew(s1, history.Fail, 3100, 3110))},
		{"linearizable: second grant while the holder lives", false, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).acquire(s2, "a", 9, 20, 30).renew(s1, history.OK, 40, 50))},
		{"linearizable: acknowledged release undone", false, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).release(s1, "a", 5, history.OK, 20, 30).read("a", s1, 5, 40, 50))},
		{"linearizable: token goes backwards", false, lin((&syn{}).
			acquire(s1, "a", 9, 0, 10).release(s1, "a", 9, history.OK, 20, 30).acquire(s2, "a", 5, 40, 50))},
		{"linearizable: lost acquire takes effect after destroy", false, lin((&syn{}).
			add(history.Op{Kind: history.Acquire, Type: history.Info, Session: s1, Lock: "a"}, 0, 10).
			destroy(s1, 20, 30).read("a", s1, 7, 40, 50))},
		{"linearizable: holder expires, a lost acquire takes the lock", true, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).
			add(history.Op{Kind: history.Acquire, Type: history.Info, Session: s2, Lock: "a"}, 20, 2500).
			read("a", s2, 9, 3000, 3010))},
		{"linearizable: a lost acquire takes the lock from a live holder", false, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).
			add(history.Op{Kind: history.Acquire, Type: history.Info, Session: s2, Lock: "a"}, 20, 2500).
			read("a", s2, 9, 3000, 3010).renew(s1, history.OK, 3100, 3110))},
		{"linearizable: lost acquire cancelled, the session goes on", true, lin((&syn{}).
			lostAcquire(s1, "a", "t1", 0, 10).cancel(s1, "a", "t1", 0, 20, 30).
			acquire(s2, "a", 9, 40, 50).renew(s1, history.OK, 60, 70).held(s1, "a", s2, 9, 80, 90))},
		{"linearizable: a cancel reports the grant that came first", true, lin((&syn{}).
			lostAcquire(s1, "a", "t1", 0, 10).cancel(s1, "a", "t1", 7, 20, 30).
			release(s1, "a", 7, history.OK, 40, 50).acquire(s2, "a", 9, 60, 70))},
		{"linearizable: a cancelled attempt takes effect after its cancel", false, lin((&syn{}).
			lostAcquire(s1, "a", "t1", 0, 10).cancel(s1, "a", "t1", 0, 20, 30).read("a", s1, 7, 40, 50))},
		{"linearizable: a cancel reports a grant nobody made", false, lin((&syn{}).
			acquire(s2, "a", 5, 0, 10).cancel(s1, "a", "t1", 5, 20, 30))},
		{"linearizable: refused as held while free", false, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).release(s1, "a", 5, history.OK, 20, 30).held(s2, "a", s1, 5, 40, 50))},
		{"linearizable: a blocking read answers a change during its wait", true, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).watch("a", 5, time.Second, "", 0, 6, 20, 120).release(s1, "a", 5, history.OK, 100, 110))},
		{"linearizable: a blocking read that waited its whole wait answers the state at its end", true, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).watch("a", 5, time.Second, s1, 5, 5, 20, 1030).release(s1, "a", 5, history.OK, 1040, 1050))},
		{"linearizable: a blocking read that waited its whole wait answers a state older than its end", false, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).watch("a", 5, time.Second, s1, 5, 5, 20, 1030).release(s1, "a", 5, history.OK, 100, 110))},
		{"linearizable: a node stopping gracefully ends a blocking read's wait early", true, lin((&syn{}).
			acquire(s1, "a", 5, 0, 10).watch("a", 5, time.Second, s1, 5, 5, 20, 1030).release(s1, "a", 5, history.OK, 100, 110).
			add(history.Op{Process: -1, Kind: history.Nemesis, Fault: FaultRestart, Action: history.ActionStart, FaultID: 1}, 50, 60).
			add(history.Op{Process: -1, Kind: history.Nemesis, Fault: FaultRestart, Action: history.ActionStop, FaultID: 1}, 900, 1100))},
		{"linearizable: a Go-client session takes and leaves the lock between raw holders, unrecorded", true, lin((&syn{}).
			clientSession(c1, 0, 5).acquire(s1, "a", 5, 10, 20).release(s1, "a", 5, history.OK, 30, 40).
			read("a", c1, 7, 50, 60).held(s2, "a", c1, 7, 70, 80).acquire(s2, "a", 9, 90, 100))},
		{"linearizable: a Go-client session seen holding while a raw holder lives", false, lin((&syn{}).
			clientSession(c1, 0, 5).acquire(s1, "a", 5, 10, 20).read("a", c1, 7, 30, 40).renew(s1, history.OK, 50, 60).
			release(s1, "a", 5, history.OK, 70, 80))},
		{"linearizable: a Go-client session seen under a token older than a grant before it", false, lin((&syn{}).
			clientSession(c1, 0, 5).acquire(s1, "a", 9, 10, 20).release(s1, "a", 9, history.OK, 30, 40).read("a", c1, 7, 50, 60))},
	}
}

func fencingCases() []Case {
	stale := func() *syn {
		return (&syn{}).acquire(s1, "a", 5, 0, 10).write(s1, "a", 5, true, 11, 12).
			acquire(s2, "a", 9, 3000, 3010).write(s2, "a", 9, true, 3011, 3012)
	}
	cfgStale := func(b *syn) func() Result {
		return func() Result {
			cfg := DefaultConfig(2 * time.Second)
			cfg.ExpectStaleWrites = true
			return CheckFencing(b.ops, cfg)
		}
	}
	return []Case{
		{"fencing: stale write rejected", true, cfgStale(stale().write(s1, "a", 5, false, 4000, 4001))},
		{"fencing: resource ignores tokens, stale write accepted", false, with(stale().write(s1, "a", 5, true, 4000, 4001), CheckFencing)},
		{"fencing: accepted token never granted", false, with((&syn{}).acquire(s1, "a", 5, 0, 10).write(s1, "a", 6, true, 11, 12), CheckFencing)},
		{"fencing: two writers under one token", false, with((&syn{}).acquire(s1, "a", 5, 0, 10).read("a", s2, 5, 11, 12).
			write(s1, "a", 5, true, 13, 14).write(s2, "a", 5, true, 15, 16), CheckFencing)},
		{"fencing: client pauses but nothing stale was rejected", false, cfgStale(stale())},
		{"fencing: a stale write accepted by a resource that does not check tokens is not judged here", true, cfgStale(stale().
			write(s1, "a", 5, false, 4000, 4001).
			add(history.Op{Kind: history.Write, Session: s1, Lock: "a", Token: 5, Unchecked: true}, 4002, 4003))},
		{"fencing: a Go-client worker writes under the token it believed it was granted", true, with((&syn{}).
			clientSession(c1, 0, 5).add(history.Op{Kind: history.Believe, Session: c1, Lock: "a", OutToken: 7}, 10, 50).
			write(c1, "a", 7, true, 20, 21), CheckFencing)},
	}
}

func tokenCases() []Case {
	return []Case{
		{"token-order: handover", true, with(handover(), CheckTokenOrder)},
		{"token-order: idempotent re-acquire keeps its token", true, with((&syn{}).acquire(s1, "a", 5, 0, 10).acquire(s1, "a", 5, 20, 30), CheckTokenOrder)},
		{"token-order: later grant has lower token", false, with((&syn{}).acquire(s1, "a", 9, 0, 10).acquire(s2, "a", 5, 20, 30), CheckTokenOrder)},
		{"token-order: one token, two sessions", false, with((&syn{}).acquire(s1, "a", 5, 0, 10).acquire(s2, "a", 5, 5, 30), CheckTokenOrder)},
	}
}

func durabilityCases() []Case {
	return []Case{
		{"durability: handover", true, with(handover(), CheckDurability)},
		{"durability: released lock seen held again", false, with((&syn{}).acquire(s1, "a", 5, 0, 10).
			release(s1, "a", 5, history.OK, 20, 30).read("a", s1, 5, 40, 50), CheckDurability)},
		{"durability: destroyed session renewed", false, with((&syn{}).create(s1, 0, 5).destroy(s1, 20, 30).
			renew(s1, history.OK, 40, 50), CheckDurability)},
		{"durability: lost session revived", false, with((&syn{}).create(s1, 0, 5).renew(s1, history.Fail, 20, 30).
			acquire(s1, "a", 9, 40, 50), CheckDurability)},
	}
}

// paused is s1 taking "a" and renewing once at 600ms, then falling silent.
func paused() *syn {
	return (&syn{}).create(s1, 0, 5).create(s2, 0, 5).acquire(s1, "a", 5, 10, 20).renew(s1, history.OK, 600, 610)
}

// pausedWithDelay is paused, with a lock-delay of 1s on s1: "a" may pass on from 3.6s.
func pausedWithDelay() *syn {
	b := paused()
	b.ops[0].LockDelayNS = int64(time.Second)
	return b
}

func expiryCases() []Case {
	return []Case{
		{"expiry: waiter granted after TTL", true, with(paused().waitAcquire(s2, "a", 10*time.Second, 9, 1000, 2800), CheckExpiry)},
		{"expiry: lock handed on before TTL", false, with(paused().waitAcquire(s2, "a", 10*time.Second, 9, 1000, 1500), CheckExpiry)},
		{"expiry: waiter granted long after TTL", false, with(paused().waitAcquire(s2, "a", 10*time.Second, 9, 1000, 8000), CheckExpiry)},
		{"expiry: dead holder still holds", false, with(paused().read("a", s1, 5, 10000, 10010), CheckExpiry)},
		{"expiry: waiter granted after TTL and lock-delay", true, with(pausedWithDelay().waitAcquire(s2, "a", 10*time.Second, 9, 1000, 3800), CheckExpiry)},
		{"expiry: lock handed on inside the lock-delay", false, with(pausedWithDelay().waitAcquire(s2, "a", 10*time.Second, 9, 1000, 2800), CheckExpiry)},
		{"expiry: waiter granted long after TTL and lock-delay", false, with(pausedWithDelay().waitAcquire(s2, "a", 10*time.Second, 9, 1000, 9000), CheckExpiry)},
	}
}

func livenessCases() []Case {
	base := func() *syn { return (&syn{}).acquire(s1, "a", 5, 0, 10).release(s1, "a", 5, history.OK, 20, 30) }
	return []Case{
		{"liveness: probe granted", true, with(base().final(s2, "a", 9, true, 100, 200), CheckLiveness)},
		{"liveness: probe refused", false, with(base().final(s2, "a", 0, false, 100, 200), CheckLiveness)},
		{"liveness: probe too slow", false, with(base().final(s2, "a", 9, true, 100, 60000), CheckLiveness)},
		{"liveness: lock never probed", false, with(base(), CheckLiveness)},
	}
}

func convergenceCases() []Case {
	lock := api.Lock{Name: "a", Held: true, Session: s1, Token: 5, ModifyIndex: 5}
	sess := api.SessionInfo{Session: api.Session{ID: s1, TTL: "2s"}, Locks: []string{"a"}}
	node := func(id string, applied uint64, l api.Lock) NodeState {
		return NodeState{Node: id, AppliedIndex: applied, Locks: []api.Lock{l}, Sessions: []api.SessionInfo{sess}}
	}
	conv := func(nodes []NodeState, b *syn) func() Result {
		return func() Result { return CheckConvergence(nodes, b.ops) }
	}
	other := lock
	other.Token = 6
	panicky := node("n2", 7, lock)
	panicky.Panics = []string{"panic: runtime error: index out of range"}
	stuck := node("n2", 7, lock)
	stuck.StopErr = "cluster: n2 did not stop gracefully: context deadline exceeded"
	return []Case{
		{"convergence: nodes agree", true, conv([]NodeState{node("n1", 7, lock), node("n2", 7, lock)}, &syn{})},
		{"convergence: nodes disagree", false, conv([]NodeState{node("n1", 7, lock), node("n2", 7, other)}, &syn{})},
		{"convergence: a node panicked", false, conv([]NodeState{node("n1", 7, lock), panicky}, &syn{})},
		{"convergence: a node did not exit on SIGTERM", false, conv([]NodeState{node("n1", 7, lock), stuck}, &syn{})},
		{"convergence: graceful restarts stopped their nodes", true, conv([]NodeState{node("n1", 7, lock)},
			(&syn{}).add(history.Op{Process: -1, Kind: history.Nemesis, Fault: FaultRestartAll, Action: history.ActionStart, FaultID: 1}, 1, 1))},
		{"convergence: a restart had to kill its node", false, conv([]NodeState{node("n1", 7, lock)},
			(&syn{}).add(history.Op{Process: -1, Kind: history.Nemesis, Type: history.Info, Fault: FaultRestart, Action: history.ActionStart,
				FaultID: 1, Error: "cluster: n2 did not stop gracefully: context deadline exceeded"}, 1, 1))},
		{"convergence: destroyed session still there", false, conv([]NodeState{node("n1", 7, lock)}, (&syn{}).destroy(s1, 0, 10))},
		{"convergence: final grant shown by every node", true, conv([]NodeState{node("n1", 7, lock), node("n2", 7, lock)},
			(&syn{}).final(s1, "a", 5, true, 0, 10))},
		{"convergence: a node lost the final grant", false, conv([]NodeState{node("n1", 7, lock), node("n2", 7, other)},
			(&syn{}).final(s1, "a", 5, true, 0, 10))},
	}
}

// restoreOp is the restore request of a restore fault.
func restoreOp() history.Op {
	return history.Op{Process: -1, Kind: history.Nemesis, Fault: FaultRestore, Action: history.ActionStop, FaultID: 1}
}

// believe is a Go-client worker's belief that s held lock under tok from inv to comp.
func (b *syn) believe(s, lock string, tok uint64, inv, comp int64, detail string) *syn {
	return b.add(history.Op{Kind: history.Believe, Session: s, Lock: lock, OutToken: tok, API: "lock", Detail: detail}, inv, comp)
}

// clientLock is a Go-client call that took lock under tok.
func (b *syn) clientLock(s, lock string, tok uint64, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.ClientAcquire, Session: s, Lock: lock, OutToken: tok, API: "lock"}, inv, comp)
}

// clientHandover is c1 holding "a" under token 7 from 20 to 100, then c2 under 9 from 130 to
// 200, with a raw holder s1 before them.
func clientHandover() *syn {
	return (&syn{}).clientSession(c1, 0, 5).clientSession(c2, 0, 5).
		acquire(s1, "a", 5, 0, 5).release(s1, "a", 5, history.OK, 6, 8).
		clientLock(c1, "a", 7, 10, 20).believe(c1, "a", 7, 20, 100, "unlock began").
		read("a", c1, 7, 40, 50).
		clientLock(c2, "a", 9, 90, 130).believe(c2, "a", 9, 130, 200, "unlock began").
		add(history.Op{Kind: history.Observe, Process: 50, Lock: "a", Held: true, OutSession: c1, OutToken: 7}, 0, 60).
		add(history.Op{Kind: history.Observe, Process: 50, Lock: "a", Held: true, OutSession: c2, OutToken: 9}, 30, 140)
}

func beliefCases() []Case {
	return []Case{
		{"belief: holds pass from one client session to the next", true, with(clientHandover(), CheckBelief)},
		{"belief: a write inside the writer's belief", true, with(clientHandover().
			add(history.Op{Kind: history.Write, Session: c1, Lock: "a", Token: 7, Unchecked: true}, 60, 61), CheckBelief)},
		{"belief: two client sessions believe at once", false, with(clientHandover().
			clientLock(c1, "b", 11, 300, 310).believe(c1, "b", 11, 310, 400, "context done: session deadline passed").
			clientLock(c2, "b", 12, 320, 390).believe(c2, "b", 12, 390, 450, "unlock began"), CheckBelief)},
		{"belief: the server shows another holder inside a belief", false, with(clientHandover().
			clientLock(c1, "b", 11, 300, 310).believe(c1, "b", 11, 310, 400, "context done: session deadline passed").
			read("b", s2, 13, 350, 360), CheckBelief)},
		{"belief: the server shows the lock free inside a belief", false, with(clientHandover().
			clientLock(c1, "b", 11, 300, 310).believe(c1, "b", 11, 310, 400, "context done: session deadline passed").
			read("b", "", 0, 350, 360), CheckBelief)},
		{"belief: a restore frees the lock inside a belief that ends within a TTL", true, with(clientHandover().
			clientLock(c1, "b", 11, 300, 310).believe(c1, "b", 11, 310, 1500, "context done: session not found").
			add(restoreOp(), 340, 400).read("b", "", 0, 450, 460), CheckBelief)},
		{"belief: a belief outlives by far the restore that ended its session", false, with(clientHandover().
			clientLock(c1, "b", 11, 300, 310).believe(c1, "b", 11, 310, 9000, "unlock began").
			add(restoreOp(), 340, 400).read("b", "", 0, 450, 460), CheckBelief)},
		{"belief: a belief outlives a higher token granted to another (Lock reports a lost hold)", false, with(clientHandover().
			clientLock(c1, "b", 11, 300, 310).believe(c1, "b", 11, 310, 400, "context done: session deadline passed").
			acquire(s2, "b", 13, 3000, 3010).
			clientLock(c1, "b", 11, 4000, 4001).believe(c1, "b", 11, 4001, 4001, "context done: session deadline passed"), CheckBelief)},
		{"belief: an observer told of an older leader after a newer one", false, with(clientHandover().
			add(history.Op{Kind: history.Observe, Process: 50, Lock: "a", Held: true, OutSession: c1, OutToken: 7}, 140, 210), CheckBelief)},
		{"belief: a client worker writes without believing it holds", false, with(clientHandover().
			add(history.Op{Kind: history.Write, Session: c1, Lock: "a", Token: 7, Unchecked: true}, 110, 111), CheckBelief)},
	}
}

// clientRelease is a Go-client worker's Unlock of lock under tok: ok when it returned nil.
func (b *syn) clientRelease(s, lock string, tok uint64, typ history.Type, inv, comp int64) *syn {
	return b.add(history.Op{Kind: history.ClientRelease, Type: typ, Session: s, Lock: lock, Token: tok, API: "lock"}, inv, comp)
}

// cycles is c1 taking "a" under token 7 and unlocking it (acknowledged at 110), then cycling on
// "b" until 4000.
func cycles() *syn {
	b := (&syn{}).clientSession(c1, 0, 5).
		clientLock(c1, "a", 7, 10, 20).believe(c1, "a", 7, 20, 100, "unlock began").clientRelease(c1, "a", 7, history.OK, 100, 110)
	for at, tok := int64(120), uint64(10); at < 4000; at, tok = at+100, tok+2 {
		b.clientLock(c1, "b", tok, at, at+10).believe(c1, "b", tok, at+10, at+50, "unlock began").
			clientRelease(c1, "b", tok, history.OK, at+50, at+60)
	}
	return b
}

func heldByNobodyCases() []Case {
	return []Case{
		{"held-by-nobody: a cycler's locks are held only while it holds or asks for them", true, with(cycles().
			read("a", c1, 7, 30, 40).read("a", "", 0, 200, 210).read("a", "", 0, 3000, 3010), CheckHeldByNobody)},
		{"held-by-nobody: after a failed Unlock the lock stays the session's until the next one settles it", true, with(cycles().
			clientLock(c1, "c", 9, 10, 20).believe(c1, "c", 9, 20, 100, "unlock began").clientRelease(c1, "c", 9, history.Info, 100, 110).
			read("c", c1, 9, 500, 510).read("c", c1, 9, 3500, 3510).
			clientLock(c1, "c", 9, 3600, 3610).clientRelease(c1, "c", 9, history.OK, 3620, 3630), CheckHeldByNobody)},
		{"held-by-nobody: a session its worker found lost keeps its lock until it expires", true, with(cycles().
			add(history.Op{Kind: history.ClientSessionEnd, Session: c1, Detail: "lost"}, 400, 400).
			read("a", c1, 9, 500, 510).read("a", c1, 9, 3000, 3010), CheckHeldByNobody)},
		{"held-by-nobody: a late grant given back within a TTL", true, with(cycles().
			read("a", c1, 9, 500, 510).read("a", c1, 9, 1900, 1910).read("a", "", 0, 2000, 2010), CheckHeldByNobody)},
		{"held-by-nobody: a lock taken by the session after its Unlock was acknowledged, for over a TTL", false, with(cycles().
			read("a", c1, 9, 500, 510).held(s2, "a", c1, 9, 2900, 3010), CheckHeldByNobody)},
		{"held-by-nobody: a lock held by the session before it ever asked for it", false, with(cycles().
			add(history.Op{Kind: history.Observe, Process: 50, Lock: "c", Held: true, OutSession: c1, OutToken: 11}, 0, 300).
			read("c", c1, 11, 2600, 2610).clientLock(c1, "c", 11, 2700, 2710), CheckHeldByNobody)},
	}
}
