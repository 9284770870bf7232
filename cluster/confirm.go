package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// confirmer confirms this node's leadership for requests that arrived at a given moment: a
// renewal (a deposed leader must not acknowledge one) and a linearizable read (a deposed
// leader's state may miss writes a newer leader acknowledged).
//
// The proof is a majority of voters that accepted, in this leader's term, AppendEntries sent
// after the request arrived (see ackTransport for why that, and not raft's VerifyLeader,
// is the proof). Replication under load often provides it already; otherwise the confirmer
// runs a VerifyLeader round, which makes raft send heartbeats to every follower at once, and
// looks again. Rounds are shared: a caller joins the next round, which starts only after the
// previous one finished, so a burst of N callers costs about two rounds of heartbeats, not N.
type confirmer struct {
	r    *raft.Raft
	self raft.ServerID
	acks *ackTransport
	stop <-chan struct{} // closed when the node closes

	mu      sync.Mutex
	next    *round
	running bool
}

type round struct {
	done chan struct{}
	err  error
}

// maxConfirmRounds bounds the rounds one confirmation runs. Each round after the first finds
// every heartbeat that was in flight when the request arrived answered, so a second round
// is nearly always enough; more means peers keep accepting only old messages, which no live
// majority does for long.
const maxConfirmRounds = 8

func newConfirmer(r *raft.Raft, self raft.ServerID, acks *ackTransport, stop <-chan struct{}) *confirmer {
	return &confirmer{r: r, self: self, acks: acks, stop: stop}
}

// confirm returns nil once a majority of voters accepted this node's leadership of term in
// messages sent at or after since, which must not be earlier than the arrival of the request
// it confirms; term is the one the request was admitted in. Once the node leaves that term no
// confirmation can succeed, even if it leads again in a later one.
func (c *confirmer) confirm(ctx context.Context, since time.Time, term uint64) error {
	return c.confirmWith(ctx, since, term, raft.Server{})
}

// confirmWith is confirm counting asker (when not zero) as a voter that accepted the term
// after since; see ackTransport.quorumSince.
func (c *confirmer) confirmWith(ctx context.Context, since time.Time, term uint64, asker raft.Server) error {
	for i := 0; ; i++ {
		if c.confirmedWith(since, term, asker) {
			return nil
		}
		if c.r.CurrentTerm() != term {
			return verifyError(errTermChanged)
		}
		if i == maxConfirmRounds {
			return verifyError(errNotConfirmed)
		}
		if err := c.round(ctx); err != nil {
			return err
		}
	}
}

// confirmedWith reports whether this node leads in term and a majority of voters accepted
// that term in messages sent at or after since, counting asker (when not zero) as one that
// did; see ackTransport.quorumSince.
func (c *confirmer) confirmedWith(since time.Time, term uint64, asker raft.Server) bool {
	if c.r.State() != raft.Leader || c.r.CurrentTerm() != term {
		return false
	}
	f := c.r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return c.acks.quorumSince(f.Configuration(), c.self, asker, term, since) && c.r.CurrentTerm() == term
}

// round joins the next VerifyLeader round and waits for its outcome.
func (c *confirmer) round(ctx context.Context) error {
	c.mu.Lock()
	if c.next == nil {
		c.next = &round{done: make(chan struct{})}
	}
	r := c.next
	if !c.running {
		c.running = true
		c.next = nil
		go c.run(r)
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		if r.err != nil {
			return verifyError(r.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *confirmer) run(r *round) {
	for r != nil {
		r.err = c.verify()
		close(r.done)
		c.mu.Lock()
		r, c.next = c.next, nil
		if r == nil {
			c.running = false
		}
		c.mu.Unlock()
	}
}

// verify asks raft to confirm the leadership once, which also sends heartbeats to every
// follower at once. Raft may buffer the request and then shut down without ever answering it,
// so the wait also ends when the node closes.
func (c *confirmer) verify() error {
	if done, err := awaitUntil(c.stop, c.r.VerifyLeader()); done {
		return err
	}
	return raft.ErrRaftShutdown
}
