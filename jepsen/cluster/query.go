package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/jepsen/checker"
)

// requestTimeout bounds each control request, so a paused node cannot stall the harness.
const requestTimeout = 2 * time.Second

// pollInterval is how often waits re-check the cluster.
const pollInterval = 50 * time.Millisecond

// ErrNoLeader means no reachable node claims leadership.
var ErrNoLeader = errors.New("cluster: no leader")

// call makes one control request to a node and decodes a 2xx body into out.
func (c *Cluster) call(ctx context.Context, n *Node, method, path string, body, out any) (int, error) {
	return c.callWith(ctx, n, method, path, body, out, nil)
}

// callWith is call that also stores the response headers in *hdr, when hdr is not nil.
func (c *Cluster) callWith(ctx context.Context, n *Node, method, path string, body, out any, hdr *http.Header) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var enc []byte
	if body != nil {
		var err error
		if enc, err = json.Marshal(body); err != nil {
			return 0, fmt.Errorf("cluster: encode: %w", err)
		}
	}
	status, h, b, err := c.send(ctx, n, method, path, enc, "application/json")
	if hdr != nil && h != nil {
		*hdr = h
	}
	if err != nil {
		return status, err
	}
	if status/100 != 2 {
		return status, fmt.Errorf("cluster: %s %s on %s: %d %s", method, path, n.ID, status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return status, fmt.Errorf("cluster: decode %s on %s: %w", path, n.ID, err)
		}
	}
	return status, nil
}

// send makes one request to n, with body (none if nil) as contentType and the cluster's
// token, and returns the status, the response headers and the whole body.
func (c *Cluster) send(ctx context.Context, n *Node, method, path string, body []byte, contentType string) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.Scheme()+"://"+n.HTTPAddr+path, rd)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cluster: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set(api.HeaderToken, c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("cluster: %s %s on %s: %w", method, path, n.ID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, resp.Header, nil, fmt.Errorf("cluster: read %s on %s: %w", path, n.ID, err)
	}
	return resp.StatusCode, resp.Header, b, nil
}

// Info is the node's own view of the cluster (GET /v1/cluster?consistency=stale).
func (c *Cluster) Info(ctx context.Context, n *Node) (api.Cluster, error) {
	var info api.Cluster
	_, err := c.call(ctx, n, http.MethodGet, "/v1/cluster?consistency=stale", nil, &info)
	return info, err
}

// Ready reports whether GET /v1/ready answers 200.
func (c *Cluster) Ready(ctx context.Context, n *Node) bool {
	_, err := c.call(ctx, n, http.MethodGet, "/v1/ready", nil, nil)
	return err == nil
}

// Healthy reports whether GET /v1/health answers 200.
func (c *Cluster) Healthy(ctx context.Context, n *Node) bool {
	_, err := c.call(ctx, n, http.MethodGet, "/v1/health", nil, nil)
	return err == nil
}

// poll calls check every pollInterval until it returns nil or ctx ends (see Poll).
func poll(ctx context.Context, check func() error) error {
	return Poll(ctx, pollInterval, check)
}

// Poll calls check, pausing between calls, until it returns nil or ctx ends; then it returns
// ctx's error wrapped with check's last one.
func Poll(ctx context.Context, pause time.Duration, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", ctx.Err(), err)
		case <-time.After(pause):
		}
	}
}

// WaitHealthy waits until the node serves HTTP.
func (c *Cluster) WaitHealthy(ctx context.Context, n *Node) error {
	return poll(ctx, func() error {
		if n.State() == Stopped {
			return fmt.Errorf("%s: %w", n.ID, ErrNotRunning)
		}
		if !c.Healthy(ctx, n) {
			return fmt.Errorf("cluster: %s not healthy", n.ID)
		}
		return nil
	})
}

// WaitReady waits until every running node is ready and all agree on one leader.
func (c *Cluster) WaitReady(ctx context.Context) error {
	return poll(ctx, func() error {
		leaders := map[string]bool{}
		for _, n := range c.Nodes {
			if n.State() != Running {
				continue
			}
			if !c.Ready(ctx, n) {
				return fmt.Errorf("cluster: %s not ready", n.ID)
			}
			info, err := c.Info(ctx, n)
			if err != nil {
				return err
			}
			leaders[info.Leader] = true
		}
		if len(leaders) != 1 || leaders[""] {
			return fmt.Errorf("cluster: nodes disagree on the leader: %v", leaders)
		}
		return nil
	})
}

// WaitFeatures waits until every running node has applied the enabling of every feature all
// of them support, so that the workers' clients use them from the start (a client that finds
// a feature missing asks again only every 30 s).
func (c *Cluster) WaitFeatures(ctx context.Context) error {
	return poll(ctx, func() error {
		var shared []string
		var infos []api.Cluster
		for i, n := range c.Nodes {
			if n.State() != Running {
				continue
			}
			var h api.Health
			if _, err := c.call(ctx, n, http.MethodGet, "/v1/health", nil, &h); err != nil {
				return err
			}
			if i == 0 || shared == nil {
				shared = h.Features
			}
			shared = slices.DeleteFunc(slices.Clone(shared), func(f string) bool { return !slices.Contains(h.Features, f) })
			info, err := c.Info(ctx, n)
			if err != nil {
				return err
			}
			infos = append(infos, info)
		}
		for _, info := range infos {
			for _, f := range shared {
				if !slices.Contains(info.Features, f) {
					return fmt.Errorf("cluster: feature %q not enabled yet", f)
				}
			}
		}
		return nil
	})
}

// Leader asks every running node (the spare included) and returns the one that says it leads, with the highest term.
func (c *Cluster) Leader(ctx context.Context) (*Node, uint64, error) {
	var best *Node
	var term uint64
	for _, n := range c.all() { // the spare too, which may lead while it is a member
		if n.State() != Running {
			continue
		}
		info, err := c.Info(ctx, n)
		if err != nil || info.Leader != n.ID {
			continue
		}
		if best == nil || info.Term > term {
			best, term = n, info.Term
		}
	}
	if best == nil {
		return nil, 0, ErrNoLeader
	}
	return best, term, nil
}

// WaitLeader waits until some running node says it leads.
func (c *Cluster) WaitLeader(ctx context.Context) (*Node, error) {
	var leader *Node
	err := poll(ctx, func() error {
		n, _, err := c.Leader(ctx)
		leader = n
		return err
	})
	return leader, err
}

// TransferLeadership asks the node to hand leadership over (forwarded to the leader), to the
// node named to, or to any if to is empty.
func (c *Cluster) TransferLeadership(ctx context.Context, n *Node, to string) (string, error) {
	var out api.TransferResponse
	_, err := c.call(ctx, n, http.MethodPost, "/v1/cluster/leadership-transfer", api.TransferRequest{ID: to}, &out)
	return out.Leader, err
}

// States waits until every node has applied the same index, then reads each node's own lock
// and session tables. A node that cannot be read gets Err set. Panics are filled from the logs.
func (c *Cluster) States(ctx context.Context) []checker.NodeState {
	var states []checker.NodeState
	err := poll(ctx, func() error {
		states = c.readStates(ctx)
		for _, s := range states {
			if s.Err != "" {
				return errors.New(s.Err)
			}
			if s.AppliedIndex != states[0].AppliedIndex {
				return fmt.Errorf("cluster: applied index %s@%d, %s@%d", s.Node, s.AppliedIndex, states[0].Node, states[0].AppliedIndex)
			}
		}
		return nil
	})
	panics := c.Panics()
	for i := range states {
		states[i].Panics = panics[states[i].Node]
		if err != nil && states[i].Err == "" && states[i].AppliedIndex != states[0].AppliedIndex {
			states[i].Err = err.Error()
		}
	}
	return states
}

// Locks reads the node's own lock table (every held, awaited or delayed lock), without asking
// the leader.
func (c *Cluster) Locks(ctx context.Context, n *Node) ([]api.Lock, error) {
	var locks api.LockList
	_, err := c.call(ctx, n, http.MethodGet, "/v1/locks?consistency=stale", nil, &locks)
	return locks.Locks, err
}

// readStates reads each node's tables between two readings of its state machine's applied
// index (GET /v1/health), which is the index the tables show; raft's applied index (GET
// /v1/cluster) counts entries handed to the state machine that it may not have applied yet,
// as when a restarted node applies its backlog in one batch.
func (c *Cluster) readStates(ctx context.Context) []checker.NodeState {
	out := make([]checker.NodeState, len(c.Nodes))
	for i, n := range c.Nodes {
		s := checker.NodeState{Node: n.ID}
		before, err := c.Health(ctx, n)
		var locks []api.Lock
		var sessions api.SessionList
		if err == nil {
			locks, err = c.Locks(ctx, n)
		}
		if err == nil {
			_, err = c.call(ctx, n, http.MethodGet, "/v1/sessions?consistency=stale", nil, &sessions)
		}
		var after api.Health
		if err == nil {
			after, err = c.Health(ctx, n)
		}
		switch {
		case err != nil:
			s.Err = err.Error()
		case before.AppliedIndex != after.AppliedIndex:
			s.Err = fmt.Sprintf("cluster: %s applied %d..%d while being read", n.ID, before.AppliedIndex, after.AppliedIndex)
		}
		s.AppliedIndex, s.Locks, s.Sessions = after.AppliedIndex, locks, sessions.Sessions
		out[i] = s
	}
	return out
}

// Panics returns, per node, the log lines that mention a panic.
func (c *Cluster) Panics() map[string][]string {
	out := map[string][]string{}
	for _, n := range c.all() {
		f, err := os.Open(n.LogPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if strings.Contains(strings.ToLower(sc.Text()), "panic") {
				out[n.ID] = append(out[n.ID], sc.Text())
			}
		}
		f.Close()
	}
	return out
}

// RemoveMember asks node n (which forwards to the leader) to remove member id from the cluster.
func (c *Cluster) RemoveMember(ctx context.Context, n *Node, id string) error {
	_, err := c.call(ctx, n, http.MethodDelete, "/v1/cluster/members/"+url.PathEscape(id), nil, nil)
	return err
}

// AgentToken is the token a node started by the harness needs to join the cluster: the
// management token with --secure, else "".
func (c *Cluster) AgentToken() string { return c.token }

// AddMember asks node n (which forwards to the leader) to add m as a member with suffrage
// "voter" or "nonvoter" (POST /v1/cluster/members).
func (c *Cluster) AddMember(ctx context.Context, n *Node, m *Node, suffrage string) error {
	_, err := c.call(ctx, n, http.MethodPost, "/v1/cluster/members",
		api.AddMemberRequest{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr, Suffrage: suffrage}, nil)
	return err
}

// PromoteMember asks node n (which forwards to the leader) to make the non-voter id a voter
// (POST /v1/cluster/members/{id}/promote); the status is 409 while it has not caught up.
func (c *Cluster) PromoteMember(ctx context.Context, n *Node, id string) (int, error) {
	return c.call(ctx, n, http.MethodPost, "/v1/cluster/members/"+url.PathEscape(id)+"/promote", nil, nil)
}

// Health is the node's GET /v1/health: its id, version, the features it supports and those the
// cluster enabled as it applied the log.
func (c *Cluster) Health(ctx context.Context, n *Node) (api.Health, error) {
	var h api.Health
	_, err := c.call(ctx, n, http.MethodGet, "/v1/health", nil, &h)
	return h, err
}

// Suffrage is member id's suffrage ("voter" or "nonvoter") in node n's own view of the
// cluster, or "" when n's configuration does not name it.
func (c *Cluster) Suffrage(ctx context.Context, n *Node, id string) (string, error) {
	info, err := c.Info(ctx, n)
	if err != nil {
		return "", err
	}
	for _, m := range info.Members {
		if m.ID == id {
			return m.Suffrage, nil
		}
	}
	return "", nil
}
