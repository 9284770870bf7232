package cluster

import (
	"container/heap"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// expiryRetry is how soon the leader tries an expiry or a delay end again after its proposal
// failed while it still leads.
const expiryRetry = 500 * time.Millisecond

// sessionLease is one session's lease on the leader's monotonic clock. Times are offsets from
// the leaderTimers' epoch: a lease costs the leader tens of bytes, not a runtime timer each.
type sessionLease struct {
	id  fsm.SessionID
	ttl time.Duration
	// deadline is when the lease runs out; renewed when this leader last received a renewal of
	// the session (0: none since the lease was armed). A renewal moves only these.
	deadline, renewed time.Duration
	// check is when the expiry queue looks at the lease next (its deadline when armed, or when
	// it last looked); index is its place in the queue.
	check time.Duration
	index int
}

// leaseQueue orders leases by when to look at them next: a min-heap for container/heap.
type leaseQueue []*sessionLease

func (q leaseQueue) Len() int           { return len(q) }
func (q leaseQueue) Less(i, j int) bool { return q[i].check < q[j].check }
func (q leaseQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *leaseQueue) Push(x any) {
	l := x.(*sessionLease)
	l.index = len(*q)
	*q = append(*q, l)
}
func (q *leaseQueue) Pop() any {
	old := *q
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return l
}

// leaderTimers holds the leader's session expiry timers and lock-delay timers. They exist only
// while this node leads and has passed its Barrier (active); renewals reset them in memory and
// never touch the log.
type leaderTimers struct {
	n *Node

	mu     sync.Mutex
	active bool
	// term is the leadership term the timers belong to. Every callback carries the term that
	// armed it and acts only while the timers are still that term's: a retry armed before a
	// leadership was lost must not expire a session that the leader in between renewed, after
	// this node leads again.
	term uint64
	// epoch is the origin of the leases' times, taken at activation (its monotonic reading).
	epoch    time.Time
	sessions map[fsm.SessionID]*sessionLease
	// queue orders the leases by when to look at them; wake, one timer for all, goes off at the
	// first of them.
	queue  leaseQueue
	wake   *time.Timer
	delays map[delayKey]*delayTimer
	// serving are the locks whose queue a goroutine serves (serveQueues), and whether an
	// event asked for it again meanwhile.
	serving map[string]bool
}

// delayKey names one lock-delay: its lock and the index of the expiry that started it (0 for a
// delay from before semaphores-rwlocks, the lock's only one).
type delayKey struct {
	name  string
	index uint64
}

// delayTimer ends one lock-delay on the leader's monotonic clock.
type delayTimer struct {
	deadline time.Time
	t        *time.Timer
}

func newLeaderTimers(n *Node) *leaderTimers {
	return &leaderTimers{n: n}
}

// activate starts, for the leadership of term, a timer at the full TTL for every session, and
// one for the full length of every lock-delay: a leader change can only lengthen a delay, and
// no wall clock, ahead or behind, shortens it. The state machine must be current (called after
// the term's Barrier).
func (lt *leaderTimers) activate(term uint64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.active, lt.term, lt.epoch = true, term, time.Now()
	lt.sessions = make(map[fsm.SessionID]*sessionLease)
	lt.queue = nil
	lt.wake = time.AfterFunc(time.Hour, func() { lt.expireDue(term) })
	lt.delays = make(map[delayKey]*delayTimer)
	lt.serving = make(map[string]bool)
	// Events applied from here on arm their own timers (observe takes lt.mu after the FSM lock is
	// released), so nothing falls between this scan and them.
	lt.n.fsm.SessionTTLs(func(id fsm.SessionID, ttl time.Duration) {
		lt.armSessionLocked(id, ttl)
	})
	for _, d := range lt.n.fsm.DelayedLocks() {
		after := d.Length
		if after == 0 { // restored from a snapshot that did not keep it: the wall clock is all there is
			after = lt.n.wallUntil(d.Until)
		}
		lt.armDelayLocked(delayKey{d.Name, d.Index}, d.Until, after)
	}
	// A queue a command left ready (see fsm.TypeServeQueue) whose ServeQueue the leader before
	// did not commit.
	for _, name := range lt.n.fsm.ReadyQueues() {
		lt.serveLocked(name)
	}
}

// current reports whether the timers are active and belong to term.
func (lt *leaderTimers) current(term uint64) bool {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.active && lt.term == term
}

// deactivate stops and forgets every timer; called when leadership is lost.
func (lt *leaderTimers) deactivate() {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	lt.active = false
	if lt.wake != nil {
		lt.wake.Stop()
	}
	for _, dt := range lt.delays {
		dt.t.Stop()
	}
	lt.sessions, lt.queue, lt.wake, lt.delays, lt.serving = nil, nil, nil, nil, nil
}

func (lt *leaderTimers) observe(events []fsm.Event) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if !lt.active {
		return
	}
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case fsm.EventSessionCreated:
			lt.armSessionLocked(e.Session, e.TTL)
		case fsm.EventSessionEnded:
			if l := lt.sessions[e.Session]; l != nil {
				heap.Remove(&lt.queue, l.index)
				delete(lt.sessions, e.Session)
			}
		case fsm.EventDelayStarted:
			lt.armDelayLocked(delayKey{e.Lock, e.DelayIndex}, e.DelayUntil, e.Delay)
		case fsm.EventQueueReady:
			lt.serveLocked(e.Lock)
		case fsm.EventRestored:
			// A leader never restores a snapshot while leading; nothing to do.
		}
	}
}

// clock returns the time on the leases' clock.
func (lt *leaderTimers) clock() time.Duration { return time.Since(lt.epoch) }

func (lt *leaderTimers) armSessionLocked(id fsm.SessionID, ttl time.Duration) {
	if _, ok := lt.sessions[id]; ok {
		return
	}
	deadline := lt.clock() + ttl
	l := &sessionLease{id: id, ttl: ttl, deadline: deadline, check: deadline}
	lt.sessions[id] = l
	heap.Push(&lt.queue, l)
	if l.index == 0 {
		lt.wake.Reset(ttl)
	}
}

// renewMany restarts each session's lease at the full TTL, measured from now (the moment the
// leader received the renewal), and records in res which sessions have no lease. The leases
// must be those of term, in which the renewal was admitted.
func (lt *leaderTimers) renewMany(term uint64, ids []fsm.SessionID, res []RenewResult) error {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if !lt.active || lt.term != term {
		return ErrNotLeader
	}
	now := max(lt.clock(), 1) // 1 ns at least: renewed 0 means none
	for i, id := range ids {
		l := lt.sessions[id]
		if l == nil {
			res[i] = RenewResult{Status: RenewNotFound}
			continue
		}
		l.deadline, l.renewed = now+l.ttl, now
		res[i] = RenewResult{Status: RenewOK, TTL: l.ttl}
	}
	return nil
}

// expireDue runs when the first lease of term's queue is due: every due lease that a renewal
// moved goes back in the queue at its new deadline; every other is forgotten (so that later
// renewals are refused) and its expiry proposed.
func (lt *leaderTimers) expireDue(term uint64) {
	lt.mu.Lock()
	if !lt.active || lt.term != term {
		lt.mu.Unlock()
		return
	}
	now := lt.clock()
	var expired []fsm.SessionID
	for len(lt.queue) > 0 && lt.queue[0].check <= now {
		l := lt.queue[0]
		if l.deadline > now {
			l.check = l.deadline
			heap.Fix(&lt.queue, 0)
			continue
		}
		heap.Pop(&lt.queue)
		delete(lt.sessions, l.id)
		expired = append(expired, l.id)
	}
	if len(lt.queue) > 0 {
		lt.wake.Reset(lt.queue[0].check - now)
	}
	lt.mu.Unlock()
	for _, id := range expired {
		go lt.n.expireSession(id, term)
	}
}

// retryExpiry proposes the expiry again later, for a proposal that failed while leading in term.
func (lt *leaderTimers) retryExpiry(id fsm.SessionID, term uint64) {
	time.AfterFunc(expiryRetry, func() {
		if lt.current(term) {
			lt.n.expireSession(id, term)
		}
	})
}

// armDelayLocked proposes, after the given time, the end of the lock-delay that the state
// says lasts until the wall-clock time until.
func (lt *leaderTimers) armDelayLocked(key delayKey, until int64, after time.Duration) {
	if dt, ok := lt.delays[key]; ok {
		dt.t.Stop()
	}
	dt := &delayTimer{deadline: time.Now().Add(after)}
	term := lt.term
	dt.t = time.AfterFunc(after, func() {
		lt.mu.Lock()
		active := lt.active && lt.term == term && lt.delays[key] == dt
		if active {
			delete(lt.delays, key)
		}
		lt.mu.Unlock()
		if active {
			go lt.n.endDelay(key, until, term)
		}
	})
	lt.delays[key] = dt
}

// rearmDelay proposes the end of a lock-delay again later, for a proposal that failed while
// leading in term.
func (lt *leaderTimers) rearmDelay(key delayKey, until int64, term uint64) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.active && lt.term == term {
		lt.armDelayLocked(key, until, expiryRetry)
	}
}

// delayLeft returns how long this leader's timers keep a permit of the lock delayed, the
// soonest ending one of its delays, if it has any.
func (lt *leaderTimers) delayLeft(name string) (time.Duration, bool) {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	var soonest *delayTimer
	for key, dt := range lt.delays {
		if key.name == name && (soonest == nil || dt.deadline.Before(soonest.deadline)) {
			soonest = dt
		}
	}
	if soonest == nil {
		return 0, false
	}
	return max(time.Until(soonest.deadline), 0), true
}

// serveLocked starts serving the lock's queue in this leadership, or, if a goroutine serves it
// already, makes it look again before it stops.
func (lt *leaderTimers) serveLocked(name string) {
	if _, ok := lt.serving[name]; ok {
		lt.serving[name] = true
		return
	}
	lt.serving[name] = false
	term := lt.term
	go func() {
		for {
			lt.n.serveQueue(name, term)
			lt.mu.Lock()
			again := lt.active && lt.term == term && lt.serving[name]
			if again {
				lt.serving[name] = false
			} else if lt.active && lt.term == term {
				delete(lt.serving, name)
			}
			lt.mu.Unlock()
			if !again {
				return
			}
		}
	}()
}

// count returns the number of session leases, for metrics.
func (lt *leaderTimers) count() int {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return len(lt.sessions)
}

// SessionLease is the leader's view of one session's lease.
type SessionLease struct {
	// Left is how long until the leader proposes the session's expiry unless a renewal
	// arrives first (never negative).
	Left time.Duration
	// LastRenewal is when this leader received the session's last renewal (its clock); zero if
	// none arrived since it armed the session's timer (when the session was created, or when
	// this node became leader, which restarts every lease at the full TTL).
	LastRenewal time.Time
}

// SessionLease returns the lease of session id as this node's leader timers hold it. ok is
// false when this node does not lead with its timers armed, or keeps no timer for the session
// (it does not exist, or its expiry is being proposed).
func (n *Node) SessionLease(id fsm.SessionID) (lease SessionLease, ok bool) {
	lt := n.timers
	lt.mu.Lock()
	defer lt.mu.Unlock()
	l := lt.sessions[id]
	if !lt.active || l == nil {
		return SessionLease{}, false
	}
	lease = SessionLease{Left: max(0, l.deadline-lt.clock())}
	if l.renewed != 0 {
		lease.LastRenewal = lt.epoch.Add(l.renewed)
	}
	return lease, true
}
