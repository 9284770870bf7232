package client

import (
	"context"
	"crypto/rand"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// featureAttemptNumbers is the cluster feature of numbered attempts.
const featureAttemptNumbers = "attempt-numbers"

// attempt names one try for a lock (one Lock call), which all its requests carry, so that the
// server can refuse them once the try has ended. On a cluster that numbers attempts it is a
// number of the session's counter, which the server never forgets; otherwise a random name,
// of which a session remembers only its last 16.
type attempt struct {
	id  string
	seq uint64
}

// attempts numbers a session's tries and knows which of them have not ended: the lowest of
// those is the floor that every request reports, below which the server refuses every try
// and forgets what it kept of them.
type attempts struct {
	mu   sync.Mutex
	last uint64
	open map[uint64]struct{} // tries not ended yet
}

// newAttempt starts a try for a lock: numbered when the cluster numbers attempts, which the
// client learns once from the cluster.
func (s *Session) newAttempt(ctx context.Context) attempt {
	if !s.c.supports(ctx, featureAttemptNumbers) {
		return attempt{id: rand.Text()}
	}
	a := &s.attempts
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last++
	if a.open == nil {
		a.open = make(map[uint64]struct{})
	}
	a.open[a.last] = struct{}{}
	return attempt{seq: a.last}
}

// endAttempt records that the try has ended: it holds nothing that a late request of it
// could take (it was granted and the hold is tracked, it left nothing behind, or its
// withdrawal is done), so the floor may pass it.
func (s *Session) endAttempt(t attempt) {
	if t.seq == 0 {
		return
	}
	a := &s.attempts
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.open, t.seq)
}

// floor returns the lowest number of a try not ended yet, or the next number when all have.
func (s *Session) floor() uint64 {
	a := &s.attempts
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.last + 1
	for seq := range a.open {
		f = min(f, seq)
	}
	return f
}

// onAcquire sets the attempt fields of an acquire of the try, with the session's floor now.
func (s *Session) onAcquire(req *api.AcquireRequest, t attempt) {
	req.Attempt, req.AttemptSeq, req.AttemptFloor = t.id, t.seq, 0
	if t.seq != 0 {
		req.AttemptFloor = s.floor()
	}
}

// fields returns the attempt fields of a release or cancel that ends the try.
func (s *Session) fields(t attempt) attemptFields {
	f := attemptFields{id: t.id, seq: t.seq}
	if t.seq != 0 {
		f.floor = s.floor()
	}
	return f
}

// attemptFields are what a release or a cancel says of the try it ends.
type attemptFields struct {
	id         string
	seq, floor uint64
}

// features is what the client learned of the features the cluster has enabled.
type features struct {
	mu      sync.Mutex
	at      time.Time // when they were learned; zero while unknown
	enabled []string
}

// featureRecheck is how long the client trusts a list of features that lacks one it asks
// about: the cluster enables a feature once its last member is upgraded, and a long-lived
// client should start using it then. A feature once enabled stays enabled.
const featureRecheck = 30 * time.Second

// supports reports whether the cluster has enabled the feature, learning the cluster's
// features from the cluster (GET /v1/cluster, or /v1/health for a token without
// operator:read) the first time, and again while the feature is missing from what it learned
// more than featureRecheck ago. While they cannot be learned (no endpoint answers), it
// reports false.
func (c *Client) supports(ctx context.Context, feature string) bool {
	c.features.mu.Lock()
	at, enabled := c.features.at, c.features.enabled
	c.features.mu.Unlock()
	if slices.Contains(enabled, feature) {
		return true
	}
	if !at.IsZero() && time.Since(at) < featureRecheck {
		return false
	}
	enabled, err := c.clusterFeatures(ctx)
	if err != nil {
		c.logger.Debug("could not learn the cluster's features", "error", err)
		return false
	}
	c.features.mu.Lock()
	c.features.at, c.features.enabled = time.Now(), enabled
	c.features.mu.Unlock()
	return slices.Contains(enabled, feature)
}

// forgetFeatures makes the client learn the cluster's features again, after an answer that
// says the cluster lacks one it was believed to have.
func (c *Client) forgetFeatures() {
	c.features.mu.Lock()
	c.features.at, c.features.enabled = time.Time{}, nil
	c.features.mu.Unlock()
}

// clusterFeatures reads the features the cluster has enabled.
func (c *Client) clusterFeatures(ctx context.Context) ([]string, error) {
	cl, err := c.cluster(ctx)
	if err == nil {
		return cl.Features, nil
	}
	if !errors.Is(err, ErrForbidden) && !errors.Is(err, ErrUnauthorized) {
		return nil, err
	}
	var h api.Health
	if _, err := c.do(ctx, &call{method: http.MethodGet, path: "/v1/health", out: &h}); err != nil {
		return nil, err
	}
	return h.ClusterFeatures, nil
}
