package checker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/history"
)

// NodeState is what one node reported, answering from its own state, at the end of a run.
type NodeState struct {
	// Node is the node id.
	Node string `json:"node"`
	// AppliedIndex is the node's applied index when the tables were read.
	AppliedIndex uint64 `json:"applied_index"`
	// Locks is GET /v1/locks?consistency=stale.
	Locks []api.Lock `json:"locks"`
	// Sessions is GET /v1/sessions?consistency=stale.
	Sessions []api.SessionInfo `json:"sessions"`
	// Err is why the state could not be read, if it could not.
	Err string `json:"error,omitempty"`
	// Panics are the log lines that mention a panic.
	Panics []string `json:"panics,omitempty"`
	// StopErr is why the node did not exit gracefully on SIGTERM at the end of the run, if it
	// did not: every node gets SIGTERM at once, and each must hand over, snapshot and exit.
	StopErr string `json:"stop_error,omitempty"`
}

// Digest is a short hash of the node's lock and session tables, in a canonical order.
func (n NodeState) Digest() string {
	locks := append([]api.Lock(nil), n.Locks...)
	sort.Slice(locks, func(i, j int) bool { return locks[i].Name < locks[j].Name })
	sessions := append([]api.SessionInfo(nil), n.Sessions...)
	for i := range sessions {
		// What the leader's timers say of a lease is the leader's alone, not replicated state.
		sessions[i].ExpiresIn, sessions[i].LastRenewal = "", ""
		l := append([]string(nil), sessions[i].Locks...)
		sort.Strings(l)
		sessions[i].Locks = l
	}
	sort.Slice(sessions, func(i, j int) bool { return sessions[i].ID < sessions[j].ID })
	b, _ := json.Marshal(struct {
		L []api.Lock
		S []api.SessionInfo
	}{locks, sessions})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// CheckConvergence checks that every node ended at the same applied index with the same lock
// and session tables, that no node logged a panic or failed to stop gracefully (during a fault
// or at the end), and that no session the history proved ended is still alive or holding a
// lock.
func CheckConvergence(nodes []NodeState, ops []history.Op) Result {
	res := newResult("convergence")
	if len(nodes) == 0 {
		res.violate("no node state was collected")
		res.Figures = "0 nodes"
		return res
	}
	digests := map[string][]string{}
	var figures []string
	for _, n := range nodes {
		for _, p := range n.Panics {
			res.violate("node %s logged a panic: %s", n.Node, p)
		}
		if n.StopErr != "" {
			res.violate("node %s did not stop gracefully when the whole cluster got SIGTERM: %s", n.Node, n.StopErr)
		}
		if n.Err != "" {
			res.violate("node %s: state not read: %s", n.Node, n.Err)
			figures = append(figures, n.Node+"=?")
			continue
		}
		d := n.Digest()
		digests[d] = append(digests[d], n.Node)
		figures = append(figures, fmt.Sprintf("%s@%d=%s", n.Node, n.AppliedIndex, d))
		if n.AppliedIndex != nodes[0].AppliedIndex {
			res.violate("node %s applied up to %d but node %s up to %d", n.Node, n.AppliedIndex, nodes[0].Node, nodes[0].AppliedIndex)
		}
	}
	if len(digests) > 1 {
		var parts []string
		for _, d := range sortedKeys(digests) {
			parts = append(parts, fmt.Sprintf("%s: %s", d, strings.Join(digests[d], ",")))
		}
		res.violate("nodes disagree on the lock and session tables: %s", strings.Join(parts, "; "))
	}
	checkGracefulStops(&res, ops)
	checkEndedSessions(&res, nodes, ops)
	held := checkFinalGrants(&res, nodes, ops)
	res.Figures = fmt.Sprintf("%d nodes, %d final grants on each: %s", len(nodes), held, strings.Join(figures, " "))
	return res
}

// The names of the nemesis faults that stop nodes with SIGTERM (the nemesis package's Restart
// and RestartAll; the checker does not import the nemesis).
const (
	FaultRestart    = "restart"
	FaultRestartAll = "restart-all"
)

// checkGracefulStops flags a fault whose SIGTERM did not stop its nodes: the nemesis records the
// failure, killing the node, and a node that cannot stop when told to is a bug.
func checkGracefulStops(res *Result, ops []history.Op) {
	for _, op := range ops {
		if op.Kind == history.Nemesis && (op.Fault == FaultRestart || op.Fault == FaultRestartAll) && op.Action == history.ActionStart && op.Error != "" {
			res.violate("fault %d (%s) could not stop a node gracefully:\n%s", op.FaultID, op.Fault, op)
		}
	}
}

// checkEndedSessions flags a session that the history proved ended but a node still lists.
func checkEndedSessions(res *Result, nodes []NodeState, ops []history.Op) {
	ended := map[string]history.Op{}
	for _, op := range ops {
		if op.Session != "" && provesEnd(op) {
			ended[op.Session] = op
		}
	}
	for _, n := range nodes {
		for _, s := range n.Sessions {
			if e, ok := ended[s.ID]; ok {
				res.violate("node %s still lists session %s, which ended:\n%s", n.Node, shortID(s.ID), e)
			}
		}
		for _, l := range n.Locks {
			if e, ok := ended[l.Session]; ok && l.Held {
				res.violate("node %s: lock %q still held by session %s, which ended:\n%s", n.Node, l.Name, shortID(l.Session), e)
			}
		}
	}
}

// checkFinalGrants requires every node to show each lock that a final-phase probe was granted
// (and did not give up) held by that probe under its token. It returns how many there were.
func checkFinalGrants(res *Result, nodes []NodeState, ops []history.Op) int {
	grants := map[string]history.Op{}
	for _, op := range ops {
		if op.Phase != history.PhaseFinal || op.Session == "" {
			continue
		}
		switch {
		case op.Kind == history.Acquire && op.Type == history.OK:
			grants[op.Lock] = op
		case op.Kind == history.Release || op.Kind == history.Destroy:
			for l, g := range grants {
				if g.Session == op.Session {
					delete(grants, l)
				}
			}
		}
	}
	for _, n := range nodes {
		if n.Err != "" {
			continue
		}
		table := map[string]api.Lock{}
		for _, l := range n.Locks {
			table[l.Name] = l
		}
		for _, lock := range sortedKeys(grants) {
			g := grants[lock]
			l := table[lock]
			if !l.Held || l.Session != g.Session || l.Token != g.OutToken {
				res.violate("node %s shows lock %q as held=%v by %s/%d, but it was granted to %s/%d:\n%s",
					n.Node, lock, l.Held, shortID(l.Session), l.Token, shortID(g.Session), g.OutToken, g)
			}
		}
	}
	return len(grants)
}
