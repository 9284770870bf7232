package cluster

import (
	"time"
)

// removalGrace is how long this node must be missing from a configuration it knows before it
// counts as removed. A node that installs a snapshot taken before it was added briefly holds a
// configuration without itself, until the entry that added it arrives.
func (n *Node) removalGrace() time.Duration {
	return max(5*time.Second, 10*n.cfg.ElectionTimeout)
}

// Removed returns a channel closed once this node has been removed from the cluster: its
// latest Raft configuration, which names other members, has not named it for a while. A
// removed node no longer receives the log (the leader stops sending it), so it serves
// nothing current; the agent stops it unless told to wait.
func (n *Node) Removed() <-chan struct{} { return n.removedCh }

// IsRemoved reports whether this node counts as removed now; it stops counting so if it is
// added again.
func (n *Node) IsRemoved() bool { return n.removed.Load() }

// watchRemoval follows the node's own configuration and marks it removed (see Removed).
func (n *Node) watchRemoval() {
	defer n.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	// Not being named by a configuration that names others means removed, wherever the node
	// was when it happened: running (it may have been added, promoted and removed between two
	// looks), stopped (the configuration in its data), or still catching up (its addition was
	// lost). The grace covers a configuration that briefly lacks it (see removalGrace).
	var missingSince time.Time
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		servers := n.raft.GetConfiguration().Configuration().Servers
		in := false
		for _, s := range servers {
			in = in || string(s.ID) == n.cfg.ID
		}
		switch {
		case in:
			missingSince = time.Time{}
			// Counted as removed no more once a leader replicates a configuration with it
			// again (a node told it is no member may still hold one of its own).
			if leader, _ := n.Leader(); leader != "" && n.removed.CompareAndSwap(true, false) {
				n.log.Warn("this node is a member of the cluster again")
			}
		case len(servers) == 0 || n.removed.Load():
		case missingSince.IsZero():
			missingSince = time.Now()
		case time.Since(missingSince) >= n.removalGrace():
			n.markRemoved("its Raft configuration no longer names it", len(servers))
		}
	}
}

// markRemoved makes this node count as removed, and says so in its log.
func (n *Node) markRemoved(why string, members int) {
	if !n.removed.CompareAndSwap(false, true) {
		return
	}
	n.removedOnce.Do(func() { close(n.removedCh) })
	n.log.Error("this node was removed from the cluster: "+why+", and it gets no more of the log; "+
		"it reports itself not ready. To add it again, stop it, empty its --data-dir and start it with --join",
		"id", n.cfg.ID, "members", members)
}
