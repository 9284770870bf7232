package cluster_test

import (
	"errors"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// shortTTL is the TTL of sessions whose expiry a test measures.
const shortTTL = 2 * time.Second

// expirySlack is how late after TTL an expiry may be seen: the issue allows TTL + 1 s.
const expirySlack = time.Second

// Each release hands the lock to the first waiter still alive, in arrival order, in the same
// command: the grant's token is the release's index. A waiter whose session ends is dropped
// and its acquire says so.
func TestReleaseGrantsWaitersInFIFOOrder(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()

	holder := createSession(t, leader, "holder", longTTL, 0)
	token := mustAcquire(t, leader, holder, "q", "")
	var waiters []fsm.SessionID
	var outcomes []<-chan acquireResult
	for _, name := range []string{"w1", "w2", "w3", "w4"} {
		s := createSession(t, leader, name, longTTL, 0)
		waiters = append(waiters, s)
		outcomes = append(outcomes, enqueue(t, leader, s, "q", 30*time.Second))
	}

	// w3 ends while queued: its acquire learns at once, and it is never granted.
	if _, err := leader.DestroySession(opContext(t), waiters[2]); err != nil {
		t.Fatal(err)
	}
	if r := receive(t, outcomes[2], opTimeout); r.err != nil || r.res.Status != fsm.StatusSessionNotFound {
		t.Fatalf("acquire of a destroyed waiter: %+v, %v; want session_not_found", r.res, r.err)
	}
	if n := leader.FSM().Lock("q").Waiters; n != 3 {
		t.Fatalf("waiters after one ended: %d, want 3", n)
	}

	cur := holder
	for _, i := range []int{0, 1, 3} {
		rel := mustRelease(t, leader, cur, "q", token)
		r := receive(t, outcomes[i], opTimeout)
		if r.err != nil || r.res.Status != fsm.StatusOK {
			t.Fatalf("waiter %d after release: %+v, %v; want a grant", i+1, r.res, r.err)
		}
		if r.res.Token != rel.Index || r.res.Token <= token {
			t.Fatalf("waiter %d got token %d; want the release's index %d, above the previous token %d", i+1, r.res.Token, rel.Index, token)
		}
		if l := leader.FSM().Lock("q"); !l.Held || l.Holder != waiters[i] || l.Token != r.res.Token {
			t.Fatalf("after handing over to waiter %d the leader reads %+v", i+1, l)
		}
		for j := i + 1; j < len(outcomes); j++ {
			if j != 2 {
				notYet(t, outcomes[j], "a later waiter")
			}
		}
		cur, token = waiters[i], r.res.Token
	}
	mustRelease(t, leader, cur, "q", token)
	if l := leader.FSM().Lock("q"); l.Held || l.Waiters != 0 {
		t.Fatalf("after the last release the lock reads %+v; want free and idle", l)
	}
}

// When the holder's session expires, the first waiter is granted no earlier than TTL after
// the leader received the holder's last renewal, and no later than TTL + 1 s after it.
func TestExpiryGrantsFirstWaiterWithinTTL(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()

	holder := createSession(t, leader, "holder", shortTTL, 0)
	token := mustAcquire(t, leader, holder, "x", "")
	w1 := createSession(t, leader, "w1", longTTL, 0)
	w2 := createSession(t, leader, "w2", longTTL, 0)
	first := enqueue(t, leader, w1, "x", 30*time.Second)
	second := enqueue(t, leader, w2, "x", 30*time.Second)

	// Let part of the TTL pass, so that a renewal that did not move the deadline would show.
	<-time.After(shortTTL / 2)
	sent := time.Now()
	if _, err := leader.Renew(opContext(t), holder); err != nil {
		t.Fatalf("renew: %v", err)
	}
	acked := time.Now()

	r := receive(t, first, shortTTL+expirySlack+opTimeout)
	if r.err != nil || r.res.Status != fsm.StatusOK || r.res.Token <= token {
		t.Fatalf("first waiter: %+v, %v; want a grant with a token above %d", r.res, r.err, token)
	}
	if early := sent.Add(shortTTL); r.at.Before(early) {
		t.Fatalf("granted %v after the renewal was sent: before the TTL of %v", r.at.Sub(sent), shortTTL)
	}
	if late := acked.Add(shortTTL + expirySlack); r.at.After(late) {
		t.Fatalf("granted %v after the renewal was acknowledged: later than TTL + %v", r.at.Sub(acked), expirySlack)
	}
	if _, ok := leader.FSM().Session(holder); ok {
		t.Fatal("the holder's session still exists after its lock was handed over")
	}
	if _, err := leader.Renew(opContext(t), holder); !errors.Is(err, cluster.ErrSessionNotFound) {
		t.Fatalf("renewing an expired session: %v, want ErrSessionNotFound", err)
	}
	notYet(t, second, "the second waiter")

	// The next in line is granted when the new holder's session is destroyed.
	released, err := leader.DestroySession(opContext(t), w1)
	if err != nil || len(released) != 1 || released[0] != "x" {
		t.Fatalf("destroy the new holder: %v, %v", released, err)
	}
	r2 := receive(t, second, opTimeout)
	if r2.err != nil || r2.res.Status != fsm.StatusOK || r2.res.Token <= r.res.Token {
		t.Fatalf("second waiter: %+v, %v; want a grant with a token above %d", r2.res, r2.err, r.res.Token)
	}
}

// Renewals keep a session, and its locks, alive for several TTLs; once they stop, the session
// expires within TTL + 1 s of the last one and its locks are freed.
func TestRenewalsKeepSessionAlive(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()

	kept := createSession(t, leader, "kept", shortTTL, 0)
	lapsed := createSession(t, leader, "lapsed", shortTTL, 0)
	keptToken := mustAcquire(t, leader, kept, "kept", "")
	mustAcquire(t, leader, lapsed, "lapsed", "")

	// Renew every TTL/4 for three TTLs; the session that is not renewed is the control.
	var sent, acked time.Time
	var lapsedGone time.Time
	tick := time.NewTicker(shortTTL / 4)
	defer tick.Stop()
	for end := time.Now().Add(3 * shortTTL); time.Now().Before(end); {
		<-tick.C
		n := c.currentLeader()
		if n == nil {
			continue // between leaders; the next one starts every timer at the full TTL
		}
		s := time.Now()
		if _, err := n.Renew(opContext(t), kept); err != nil {
			if errors.Is(err, cluster.ErrNotLeader) {
				continue
			}
			t.Fatalf("renewal: %v", err)
		}
		sent, acked, leader = s, time.Now(), n
		if _, ok := leader.FSM().Session(lapsed); !ok && lapsedGone.IsZero() {
			lapsedGone = time.Now()
		}
	}
	if err := leader.ReadBarrier(opContext(t)); err != nil {
		t.Fatal(err)
	}
	if _, ok := leader.FSM().Session(kept); !ok {
		t.Fatal("the renewed session expired")
	}
	if l := leader.FSM().Lock("kept"); !l.Held || l.Holder != kept || l.Token != keptToken {
		t.Fatalf("the renewed session's lock reads %+v", l)
	}
	if lapsedGone.IsZero() {
		t.Fatal("the session that was never renewed is still alive after three TTLs")
	}
	if l := leader.FSM().Lock("lapsed"); l.Held {
		t.Fatalf("the expired session's lock is still held: %+v", l)
	}

	gone := waitSessionGone(t, leader, kept, shortTTL+expirySlack+opTimeout)
	if gone.Before(sent.Add(shortTTL)) {
		t.Fatalf("expired %v after the last renewal was sent, before the TTL of %v", gone.Sub(sent), shortTTL)
	}
	if gone.After(acked.Add(shortTTL + expirySlack)) {
		t.Fatalf("expired %v after the last renewal, later than TTL + %v", gone.Sub(acked), expirySlack)
	}
	if l := leader.FSM().Lock("kept"); l.Held {
		t.Fatalf("the lock of the expired session is still held: %+v", l)
	}
}

// After a session with a lock-delay expires, its lock is not granted until the delay ends:
// a try-acquire is refused with the delay's end, and waiters queued during the delay are
// granted in order when it ends.
func TestLockDelayHoldsLockAfterExpiry(t *testing.T) {
	t.Parallel()
	const delay = 1500 * time.Millisecond
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()

	holder := createSession(t, leader, "holder", shortTTL, delay)
	token := mustAcquire(t, leader, holder, "d", "")
	b := createSession(t, leader, "b", longTTL, 0)
	w := createSession(t, leader, "w", longTTL, 0)

	waitSessionGone(t, leader, holder, shortTTL+expirySlack+opTimeout)
	l := leader.FSM().Lock("d")
	if l.Held || l.DelayUntil == 0 {
		t.Fatalf("after expiry the lock reads %+v; want free under a lock-delay", l)
	}
	until := time.Unix(0, l.DelayUntil)
	if left := time.Until(until); left > delay {
		t.Fatalf("the delay ends in %v, more than the session's lock-delay of %v", left, delay)
	}

	res, err := leader.Acquire(opContext(t), cluster.AcquireRequest{Session: b, Lock: "d"})
	if err != nil || res.Status != fsm.StatusLockDelayed || res.DelayUntil != l.DelayUntil {
		t.Fatalf("try-acquire inside the delay: %+v, %v; want lock_delayed until %d", res, err, l.DelayUntil)
	}
	first := enqueue(t, leader, b, "d", 30*time.Second)
	second := enqueue(t, leader, w, "d", 30*time.Second)
	if time.Now().After(until) {
		t.Fatal("the machine is too slow: the waiters were queued after the delay ended")
	}

	r := receive(t, first, delay+expirySlack+opTimeout)
	if r.err != nil || r.res.Status != fsm.StatusOK || r.res.Token <= token {
		t.Fatalf("first waiter: %+v, %v; want a grant with a token above %d", r.res, r.err, token)
	}
	// The leader's clock wrote the delay's end into the log; this process shares that clock.
	if r.at.Before(until) {
		t.Fatalf("granted %v before the delay ended", until.Sub(r.at))
	}
	if r.at.After(until.Add(expirySlack)) {
		t.Fatalf("granted %v after the delay ended", r.at.Sub(until))
	}
	if l := leader.FSM().Lock("d"); l.DelayUntil != 0 || l.Holder != b {
		t.Fatalf("after the delay the lock reads %+v", l)
	}
	notYet(t, second, "the second waiter")
	rel := mustRelease(t, leader, b, "d", r.res.Token)
	if r2 := receive(t, second, opTimeout); r2.err != nil || r2.res.Status != fsm.StatusOK || r2.res.Token != rel.Index {
		t.Fatalf("second waiter: %+v, %v; want a grant at the release's index %d", r2.res, r2.err, rel.Index)
	}
	if d := leader.FSM().DelayedLocks(); len(d) != 0 {
		t.Fatalf("delayed locks left: %+v", d)
	}
}

// delayAfterExpiry puts lock "d" under a lock-delay on the leader: a session with that delay
// holds it and expires. It returns a live session b and the delay's end as the state has it.
func delayAfterExpiry(t *testing.T, leader *cluster.Node, delay time.Duration) (b fsm.SessionID, until int64) {
	t.Helper()
	holder := createSession(t, leader, "holder", shortTTL, delay)
	mustAcquire(t, leader, holder, "d", "")
	b = createSession(t, leader, "b", longTTL, 0)
	waitSessionGone(t, leader, holder, shortTTL+expirySlack+opTimeout)
	if until = leader.FSM().Lock("d").DelayUntil; until == 0 {
		t.Fatal("no lock-delay after the expiry")
	}
	return b, until
}

// grantedNoSoonerThan checks that "d" is still delayed on the leader n, then that b, queued for
// it, is granted, not before earliest.
func grantedNoSoonerThan(t *testing.T, n *cluster.Node, b fsm.SessionID, until int64, earliest time.Time, what string) {
	t.Helper()
	res, err := n.Acquire(opContext(t), cluster.AcquireRequest{Session: b, Lock: "d"})
	if err != nil || res.Status != fsm.StatusLockDelayed || res.DelayUntil != until {
		t.Fatalf("try-acquire %s: %+v, %v; want lock_delayed until %d", what, res, err, until)
	}
	granted := enqueue(t, n, b, "d", 30*time.Second)
	r := receive(t, granted, time.Until(earliest)+expirySlack+opTimeout)
	if r.err != nil || r.res.Status != fsm.StatusOK {
		t.Fatalf("waiter: %+v, %v; want a grant", r.res, r.err)
	}
	if r.at.Before(earliest) {
		t.Fatalf("granted %v before the delay could have passed %s", earliest.Sub(r.at), what)
	}
}

// A lock-delay lasts its full length whatever the servers' wall clocks say. The delay starts
// under n1; then n2, whose clock is an hour ahead of n1's (or behind it), takes over. The new
// leader keeps the lock delayed for the whole delay from when it took over: with the ahead
// clock, a leader that trusted wall time would end the delay at once, and with the behind one,
// only an hour later.
func TestLockDelayIgnoresClockSkewAcrossLeaderChange(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(skew.String(), func(t *testing.T) {
			t.Parallel()
			c := newTestCluster(t, 3, func(cfg *cluster.Config) {
				if cfg.ID != "n1" {
					cfg.ClockOffset = skew
				}
			})
			_, leader := c.waitLeader()
			if leader.ID() != "n1" {
				if err := leader.TransferLeadership(opContext(t), "n1"); err != nil {
					t.Fatal(err)
				}
				testkit.Eventually(t, leaderTimeout, "n1 to lead", func() bool { return c.node(0).IsLeader() })
				leader = c.node(0)
			}
			b, until := delayAfterExpiry(t, leader, delay)

			handover := time.Now()
			if err := leader.TransferLeadership(opContext(t), "n2"); err != nil {
				t.Fatal(err)
			}
			var next *cluster.Node
			testkit.Eventually(t, leaderTimeout, "a new leader", func() bool {
				next = c.currentLeader()
				return next != nil && next.ID() != "n1"
			})
			if left, least := next.DelayLeft("d", until), delay-time.Since(handover); left < least {
				t.Fatalf("the new leader ends the delay in %v, sooner than the %v it must last", left, least)
			}
			grantedNoSoonerThan(t, next, b, until, handover.Add(delay), "after the hand-over to "+next.ID())
		})
	}
}

// A lock-delay in force when the whole cluster stops gracefully (each node snapshots its state)
// lasts its whole length again after the restart, even though every node's clock then reads an
// hour later: the snapshot keeps the delay's length, and the new leader runs it in full.
func TestLockDelayOutlastsARestartIntoALaterClock(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()
	b, until := delayAfterExpiry(t, leader, delay)
	c.waitConverged()

	for i := range c.ids {
		c.stop(i)
	}
	c.tune = func(cfg *cluster.Config) { cfg.ClockOffset = time.Hour }
	restarted := time.Now()
	c.restartAll()
	_, leader = c.waitLeader()
	grantedNoSoonerThan(t, leader, b, until, restarted.Add(delay), "after the restart")
}

// A lock-delay applies only to expiry: a lock released, or freed by destroying its session,
// is granted again at once.
func TestNoLockDelayAfterReleaseOrDestroy(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()

	a := createSession(t, leader, "a", longTTL, 30*time.Second)
	b := createSession(t, leader, "b", longTTL, 0)

	ta := mustAcquire(t, leader, a, "r", "")
	queued := enqueue(t, leader, b, "r", 30*time.Second)
	rel := mustRelease(t, leader, a, "r", ta)
	if r := receive(t, queued, opTimeout); r.err != nil || r.res.Status != fsm.StatusOK || r.res.Token != rel.Index {
		t.Fatalf("waiter after release: %+v, %v; want a grant at the release's index %d", r.res, r.err, rel.Index)
	}
	if l := leader.FSM().Lock("r"); l.DelayUntil != 0 || l.Holder != b {
		t.Fatalf("after release the lock reads %+v; want held by the waiter, no delay", l)
	}

	mustAcquire(t, leader, a, "s", "")
	if _, err := leader.DestroySession(opContext(t), a); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, leader, b, "s", "") // at once: no lock_delayed
	if d := leader.FSM().DelayedLocks(); len(d) != 0 {
		t.Fatalf("delayed locks after release and destroy: %+v", d)
	}
}
