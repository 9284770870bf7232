package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/raftlock/raftlock/api"
)

// removalGrace is how long this node must be missing from a configuration it knows before it
// counts as removed, and how long it must hear no leader before it asks the others whether it
// still is a member. A node that installs a snapshot taken before it was added briefly holds a
// configuration without itself, until the entry that added it arrives.
func (n *Node) removalGrace() time.Duration { return n.cfg.RemovalGrace }

// Removed returns a channel closed once this node has been removed from the cluster: its
// latest Raft configuration, which names other members, has not named it for a while, or the
// leader's does not. A removed node no longer receives the log (the leader stops sending it),
// so it serves nothing current; the agent stops it unless told to wait.
func (n *Node) Removed() <-chan struct{} { return n.removedCh }

// IsRemoved reports whether this node counts as removed now; it stops counting so if it is
// added again.
func (n *Node) IsRemoved() bool { return n.removed.Load() }

// watchRemoval follows the node's own configuration and marks it removed (see Removed).
//
// Not being named by a configuration that names others means removed, wherever the node was
// when it happened: running (it may have been added, promoted and removed between two looks),
// stopped (the configuration in its data), or still catching up (its addition was lost), once
// the leader's configuration does not name it either. But
// the leader sends the entry that removes a node only once, on a best-effort basis, and a node
// removed while it was stopped never gets it: its own configuration still names it, and it
// campaigns in vain (the others refuse its votes). So a node that hears no leader for a while
// asks the others for the leader's configuration, as an etcd member learns from its peers that
// it was removed.
func (n *Node) watchRemoval(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	var missingSince, leaderlessSince, lastAsked time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		servers := n.raft.GetConfiguration().Configuration().Servers
		in := false
		for _, s := range servers {
			in = in || string(s.ID) == n.cfg.ID
		}
		leader, _ := n.Leader()
		switch {
		case leader != "" || !in:
			leaderlessSince = time.Time{}
		case leaderlessSince.IsZero():
			leaderlessSince = time.Now()
		case time.Since(leaderlessSince) >= n.removalGrace() && time.Since(lastAsked) >= n.removalGrace() && !n.removed.Load():
			lastAsked = time.Now()
			if member, known := n.leaderNamesMe(ctx); known && !member {
				n.markRemoved("the leader's configuration no longer names it", len(servers))
			}
		}
		switch {
		case in:
			missingSince = time.Time{}
			// Counted as removed no more once a leader replicates a configuration with it
			// again (a node told it is no member may still hold one of its own).
			if leader != "" && n.removed.CompareAndSwap(true, false) {
				n.log.Warn("this node is a member of the cluster again")
			}
		case len(servers) == 0 || n.removed.Load():
		case missingSince.IsZero():
			missingSince = time.Now()
		case time.Since(missingSince) >= n.removalGrace() && time.Since(lastAsked) >= n.removalGrace():
			// A node catching up from a snapshot taken before its addition holds such a
			// configuration until the entry adding it arrives, which on a large state or a
			// loaded machine takes longer than any grace: the leader's word decides. Without
			// an answer the node asks again later; meanwhile a configuration without it
			// keeps it from campaigning, and it hears no leader, so it is not ready anyway.
			lastAsked = time.Now()
			if member, known := n.leaderNamesMe(ctx); known && !member {
				n.markRemoved("neither its Raft configuration nor the leader's names it", len(servers))
			}
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
		"it reports itself not ready. To add it again, stop it and start it with --join (its --data-dir may stay as it is)",
		"id", n.cfg.ID, "members", members)
}

// leaderNamesMe asks the other members it knows of (GET /v1/cluster, which a follower
// forwards to the leader) whether the leader's configuration names this node. known is false
// when no answer came from a node that knows a leader.
func (n *Node) leaderNamesMe(ctx context.Context) (member, known bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, m := range n.fsm.Members() {
		if m.ID == n.cfg.ID || m.HTTPAddr == "" {
			continue
		}
		c, err := n.fetchCluster(ctx, m.HTTPAddr)
		if err != nil || c.Leader == "" {
			n.log.Debug("could not ask a member whether this node still is one", "member", m.ID, "error", err)
			continue
		}
		for _, x := range c.Members {
			if x.ID == n.cfg.ID {
				return true, true
			}
		}
		return false, true
	}
	return false, false
}

// fetchCluster reads GET /v1/cluster (linearizable: the leader's view) through the member at
// endpoint, with the agent's token.
func (n *Node) fetchCluster(ctx context.Context, endpoint string) (api.Cluster, error) {
	var c api.Cluster
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.memberURL(endpoint, "/v1/cluster"), nil)
	if err != nil {
		return c, err
	}
	setToken(req, n.cfg.Token)
	resp, err := n.httpc.Do(req)
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 1<<20)).Decode(&c); err != nil {
		return c, errors.Join(fmt.Errorf("%s", req.URL), err)
	}
	return c, nil
}
