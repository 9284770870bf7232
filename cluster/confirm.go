package cluster

import (
	"context"
	"sync"

	"github.com/hashicorp/raft"
)

// confirmer shares leadership confirmations among concurrent callers. A caller joins the next
// round, and a round starts only after the previous one finished, so every caller is answered
// by a confirmation that began after it arrived — which is what makes a renewal or a read safe
// — while a burst of N callers costs about two rounds of heartbeats, not N.
type confirmer struct {
	r       *raft.Raft
	stop    <-chan struct{} // closed when the node closes
	mu      sync.Mutex
	next    *round
	running bool
}

type round struct {
	done chan struct{}
	err  error
}

func newConfirmer(r *raft.Raft, stop <-chan struct{}) *confirmer {
	return &confirmer{r: r, stop: stop}
}

// confirm returns nil once a majority confirmed this node's leadership after the call began.
func (c *confirmer) confirm(ctx context.Context) error {
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

// verify asks raft to confirm the leadership once. Raft may buffer the request and then shut
// down without ever answering it, so the wait also ends when the node closes.
func (c *confirmer) verify() error {
	if done, err := awaitUntil(c.stop, c.r.VerifyLeader()); done {
		return err
	}
	return raft.ErrRaftShutdown
}
