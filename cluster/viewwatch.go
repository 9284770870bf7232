package cluster

import (
	"sync"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// viewSignal wakes the streams of the sessions and the cluster views (httpapi) when what they
// show may have changed: a command applied (a session created, renewed through a lock change,
// ended; a lock taken or freed; the membership or the features changed), a renewal reached
// the leader's timers (renewals are not commands), or this node heard of another leader. It
// says only that something may have changed: the stream reads the view again and sends it if
// it differs. A signal no one waits for costs a lock and a flag.
type viewSignal struct {
	mu     sync.Mutex
	ch     chan struct{}
	taken  bool // someone holds ch: close it at the next change
	closed bool
}

func newViewSignal() *viewSignal { return &viewSignal{ch: make(chan struct{})} }

// wait returns a channel closed at the next change after this call.
func (v *viewSignal) wait() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.taken = true
	return v.ch
}

// bump wakes the waiters of the current channel.
func (v *viewSignal) bump() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.taken || v.closed {
		return
	}
	close(v.ch)
	v.ch, v.taken = make(chan struct{}), false
}

// close wakes every waiter for good: the node is closing.
func (v *viewSignal) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.closed {
		v.closed = true
		close(v.ch)
	}
}

// observe bumps on any applied batch that reported an event.
func (v *viewSignal) observe(events []fsm.Event) {
	if len(events) > 0 {
		v.bump()
	}
}

// observeLeader is raft's observer filter for leader changes: it bumps and never passes the
// observation on.
func (v *viewSignal) observeLeader(o *raft.Observation) bool {
	if _, ok := o.Data.(raft.LeaderObservation); ok {
		v.bump()
	}
	return false
}

// WatchViews returns a channel closed at the next change that may alter the list of sessions
// or the cluster's view as this node answers them: an applied command, a renewal on this
// leader, a change of leader known here, or the node closing. Take it before reading the view,
// then wait on it, so that no change falls in between.
func (n *Node) WatchViews() <-chan struct{} { return n.views.wait() }
