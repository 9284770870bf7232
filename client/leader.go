package client

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/raftlock/raftlock/api"
)

// routeToLeader makes the endpoint of leader id the one tried first, when the client has it
// among its endpoints. A follower forwards every write and linearizable read to the leader,
// which costs the cluster a second HTTP exchange per request; talking to the leader saves it.
//
// It looks the leader's HTTP address up (GET /v1/cluster, stale) once per leader it has not
// seen, in the request that met it, one request at a time. Endpoints that do not match a
// member's advertised address (a proxy, a load balancer, another name for the host) are left
// in the order given, as is a client whose lookup fails (a token without cluster read, say).
func (c *Client) routeToLeader(ctx context.Context, id string) {
	if !c.followLeader {
		return
	}
	if p := c.leaderID.Load(); p != nil && *p == id {
		return
	}
	if !c.lookingUp.CompareAndSwap(false, true) {
		return
	}
	defer c.lookingUp.Store(false)
	idx, err := c.leaderEndpoint(ctx, id)
	if err != nil {
		if ctx.Err() == nil {
			c.leaderID.Store(&id) // do not ask again for this leader
		}
		c.logger.Debug("looking up the leader's endpoint", "leader", id, "error", err)
		return
	}
	c.leaderID.Store(&id)
	if idx >= 0 && c.current() != idx {
		c.logger.Debug("moving to the leader's endpoint", "leader", id, "endpoint", c.endpoints[idx])
		c.cur.Store(uint64(idx))
	}
}

// leaderEndpoint returns the index of the endpoint that serves member id, or -1.
func (c *Client) leaderEndpoint(ctx context.Context, id string) (int, error) {
	var cl api.Cluster
	q := url.Values{"consistency": {"stale"}}
	lookup := &call{method: http.MethodGet, path: "/v1/cluster", query: q, out: &cl,
		attemptTimeout: min(c.requestTimeout, leaderLookupTimeout)}
	if err := c.attempt(ctx, c.endpoints[c.current()], lookup, nil); err != nil {
		return -1, err
	}
	for _, m := range cl.Members {
		if m.ID != id || m.HTTPAddr == "" {
			continue
		}
		for i, ep := range c.endpoints {
			if u, err := url.Parse(ep); err == nil && strings.EqualFold(u.Host, m.HTTPAddr) {
				return i, nil
			}
		}
	}
	return -1, nil
}
