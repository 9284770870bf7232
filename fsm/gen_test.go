package fsm_test

import (
	"math/rand"
	"slices"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// gen draws random commands over a few sessions and locks, so that they collide often.
type gen struct {
	rng   *rand.Rand
	m     *refModel
	index uint64
	term  uint64 // of the entry next returns
	now   int64
}

var (
	genLocks  = []string{"a", "b", "jobs/c", "jobs/d", "e"}
	genValues = []string{"", "v1", "v2"}
	genDelays = []time.Duration{0, 200 * time.Millisecond, time.Second}
	// Five locks by five attempts make more fences than a session keeps.
	genAttempts = []string{"t1", "t2", "t3", "t4", "t5", "~1", "~3", "~4"}
	// A few accessors, secrets and policy names, so that ACL commands collide often; "" and
	// the built-in name are among them, for the refusals.
	genAccessors = []string{"acc-1", "acc-2", "acc-3", ""}
	genSecrets   = []string{"s1", "s2", "s3", "s4", "s5"}
	genPolicies  = []string{"p1", "p2", fsm.ManagementPolicy, ""}
	genPrefixes  = []string{"", "jobs/", "jobs/c", "a"}
	genOwners    = []string{"", "acc-1", "acc-2"}
)

func (g *gen) pick(from []string) string { return from[g.rng.Intn(len(from))] }

// enableFeatures draws an enable-features command: one or two features, sorted, or now and
// then an invalid one (none, or out of order).
func (g *gen) enableFeatures() fsm.Command {
	all := fsm.AllFeatures()
	c := fsm.Command{Type: fsm.TypeEnableFeatures}
	for n := g.rng.Intn(3); n > 0; n-- {
		c.Features = append(c.Features, all[g.rng.Intn(len(all))])
	}
	if g.rng.Intn(4) != 0 {
		slices.Sort(c.Features)
		c.Features = slices.Compact(c.Features)
	}
	return c
}

// aclCommand draws an ACL command.
func (g *gen) aclCommand() fsm.Command {
	tok := fsm.ACLToken{AccessorID: g.pick(genAccessors), SecretHash: fsm.HashSecret(g.pick(genSecrets)), Description: g.pick(genValues)}
	switch g.rng.Intn(5) {
	case 0:
		return fsm.Command{Type: fsm.TypeACLBootstrap, ACLToken: tok}
	case 1:
		for n := g.rng.Intn(3); n > 0; n-- {
			tok.Policies = append(tok.Policies, g.pick(genPolicies[:3]))
		}
		return fsm.Command{Type: fsm.TypeACLCreateToken, ACLToken: tok}
	case 2:
		return fsm.Command{Type: fsm.TypeACLDeleteToken, ACLToken: fsm.ACLToken{AccessorID: tok.AccessorID}}
	case 3:
		p := fsm.Policy{Name: g.pick(genPolicies), Operator: fsm.Access(g.rng.Intn(3))}
		for n := g.rng.Intn(3); n > 0; n-- {
			p.Locks = append(p.Locks, fsm.LockRule{Prefix: g.pick(genPrefixes), Access: fsm.Access(g.rng.Intn(3))})
		}
		return fsm.Command{Type: fsm.TypeACLSetPolicy, Policy: p, CreateOnly: g.rng.Intn(2) == 0}
	}
	return fsm.Command{Type: fsm.TypeACLDeletePolicy, Policy: fsm.Policy{Name: g.pick(genPolicies)}}
}

// attempt returns an attempt half of the time, none the other half.
func (g *gen) attempt() string {
	if g.rng.Intn(2) == 0 {
		return ""
	}
	return genAttempts[g.rng.Intn(len(genAttempts))]
}

// numbered sets, now and then, a numbered attempt and a floor on c. The numbers grow slowly
// and are drawn from a window behind the highest, so that late requests of ended attempts and
// attempts below the floor are common.
func (g *gen) numbered(c *fsm.Command) {
	if g.rng.Intn(3) == 0 {
		return
	}
	top := g.index/8 + 1
	c.AttemptSeq = top - min(top-1, uint64(g.rng.Intn(6)))
	if g.rng.Intn(4) == 0 {
		c.AttemptFloor = top - min(top-1, uint64(g.rng.Intn(10)))
	}
}

// kind makes an acquire a semaphore's or a shared one, as its lock is mostly used: "e" is a
// semaphore of 3 and "jobs/d" one of 2, the others are read/write locks taken shared half the
// time; now and then a limit is wrong, out of range or given with a shared hold.
func (g *gen) kind(c *fsm.Command) {
	switch c.Lock {
	case "e":
		c.Limit = 3
	case "jobs/d":
		c.Limit = 2
	default:
		c.Shared = g.rng.Intn(2) == 0
	}
	if g.rng.Intn(12) == 0 {
		c.Limit = []uint32{0, 1, 2, 3, fsm.MaxLimit, fsm.MaxLimit + 1}[g.rng.Intn(6)]
	}
}

const genSessions = 7

// session picks a live session most of the time, so that commands mostly get past the
// session check.
func (g *gen) session() fsm.SessionID {
	if g.rng.Intn(8) != 0 {
		var live []fsm.SessionID
		for i := 1; i <= genSessions; i++ {
			if g.m.sessions[sid(i)] != nil {
				live = append(live, sid(i))
			}
		}
		if len(live) > 0 {
			return live[g.rng.Intn(len(live))]
		}
	}
	return sid(1 + g.rng.Intn(genSessions))
}

func (g *gen) deadSession() fsm.SessionID {
	for i := 0; i < genSessions; i++ {
		if id := sid(1 + g.rng.Intn(genSessions)); g.m.sessions[id] == nil {
			return id
		}
	}
	return sid(1 + g.rng.Intn(genSessions))
}

func (g *gen) lockName() string { return genLocks[g.rng.Intn(len(genLocks))] }

// next returns the next command and its log index. Indexes have gaps (raft's own entries);
// the leader's clock moves forward and sometimes back (a new leader whose clock is behind).
func (g *gen) next() (uint64, fsm.Command) {
	g.index += 1 + uint64(g.rng.Intn(3))
	if g.term == 0 || g.rng.Intn(40) == 0 {
		g.term++ // a new leader
	}
	if g.rng.Intn(20) == 0 {
		g.now -= int64(g.rng.Intn(300)) * int64(time.Millisecond)
	} else {
		g.now += int64(g.rng.Intn(150)) * int64(time.Millisecond)
	}
	c := fsm.Command{Now: g.now}
	switch p := g.rng.Intn(116); {
	case p >= 110:
		// Mostly for a lock a command left ready, as a leader proposes it.
		c.Type, c.Lock, c.Now = fsm.TypeServeQueue, g.lockName(), 0
		if ready := g.m.readyQueues(); len(ready) > 0 && g.rng.Intn(4) != 0 {
			c.Lock = ready[g.rng.Intn(len(ready))]
		}
	case p >= 108:
		return g.index, g.enableFeatures()
	case p >= 100:
		return g.index, g.aclCommand()
	case p < 10:
		c.Type, c.Session = fsm.TypeCreateSession, g.deadSession()
		c.Owner = g.pick(genOwners)
		c.Name = genValues[g.rng.Intn(len(genValues))]
		c.TTL = time.Duration(1+g.rng.Intn(10)) * time.Second
		c.LockDelay = genDelays[g.rng.Intn(len(genDelays))]
		c.Now = 0
	case p < 14:
		c.Type, c.Session, c.Now = fsm.TypeDestroySession, g.session(), 0
	case p < 20:
		c.Type, c.Session = fsm.TypeExpireSession, g.session()
		if g.rng.Intn(2) == 0 {
			// Decided in this entry's term, or by a timer of an earlier one.
			c.Term = g.term - uint64(g.rng.Intn(int(min(g.term, 2))))
		}
	case p < 52:
		c.Type, c.Session, c.Lock = fsm.TypeAcquire, g.session(), g.lockName()
		c.Queue = g.rng.Intn(2) == 0
		c.Attempt = g.attempt()
		g.numbered(&c)
		g.kind(&c)
		if g.rng.Intn(2) == 0 {
			c.SetValue, c.Value = true, genValues[g.rng.Intn(len(genValues))]
		}
	case p < 72:
		c.Type, c.Lock = fsm.TypeRelease, g.lockName()
		c.Attempt = g.attempt()
		g.numbered(&c)
		l := g.m.locks[c.Lock]
		if l != nil && len(l.holds) > 0 && g.rng.Intn(10) < 7 {
			h := l.holds[g.rng.Intn(len(l.holds))]
			c.Session, c.Token = h.session, h.token // mostly a real holder and token
			if g.rng.Intn(10) == 0 {
				c.Token-- // or a stale token
			}
		} else {
			c.Session, c.Token = g.session(), uint64(g.rng.Intn(int(g.index)+1))
		}
		c.Now = 0
	case p < 80:
		c.Type, c.Session, c.Lock, c.Now = fsm.TypeCancelWait, g.session(), g.lockName(), 0
		c.Attempt = g.attempt()
		g.numbered(&c)
		if l := g.m.locks[c.Lock]; l != nil && len(l.queue) > 0 && g.rng.Intn(3) != 0 {
			c.Session = l.queue[g.rng.Intn(len(l.queue))].Session // mostly someone who waits
		}
	case p < 90:
		c.Type, c.Lock = fsm.TypeDelayEnded, g.lockName()
		if l := g.m.locks[c.Lock]; l != nil && len(l.delays) > 0 && g.rng.Intn(2) == 0 {
			d := l.delays[g.rng.Intn(len(l.delays))]
			c.Now = d.until + int64(g.rng.Intn(3)) - 1 // right at the edge
			if g.rng.Intn(4) != 0 {
				c.DelayIndex = d.index // named, as leaders name it once they can
			}
		}
		if g.rng.Intn(20) == 0 {
			c.DelayIndex = g.index - uint64(g.rng.Intn(int(g.index))) // a delay that may not exist
		}
	case p < 93:
		c.Type, c.Now = fsm.TypeSetMember, 0
		c.Member = fsm.Member{ID: []string{"n1", "n2", "n3"}[g.rng.Intn(3)], RaftAddr: genValues[g.rng.Intn(3)], HTTPAddr: "h"}
	case p < 97:
		c.Type, c.Now = fsm.TypeRemoveMember, 0
		c.Member.ID = []string{"n1", "n2", "n3"}[g.rng.Intn(3)]
	default:
		// An acquire by a session that does not exist and never will.
		c.Type, c.Session, c.Lock = fsm.TypeAcquire, sid(1000), g.lockName()
	}
	return g.index, c
}
