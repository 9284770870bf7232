package client

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/raftlock/raftlock/api"
)

// featureAttemptNumbers is the cluster feature of numbered attempts.
const featureAttemptNumbers = "attempt-numbers"

// attempt names one try for a lock (one Lock call), which all its requests carry, so that the
// server can refuse them once the try has ended. Every try has a number of the session's
// counter. On a cluster that numbers attempts it is carried as such (seq, with the session's
// floor), and the server never forgets it; before the client knows the cluster does, it is
// carried as the string "~N" (id), which a cluster of the previous version fences as any
// string (remembering a session's last 16) and one with feature attempt-ends takes for the
// numbered attempt N: so a try begun before the cluster numbered attempts is covered, once it
// does, by the floor of the session's later requests, however many tries came between.
type attempt struct {
	id  string // "~N" while the cluster is not known to number attempts
	seq uint64 // N, on a cluster that numbers attempts
	n   uint64 // N, in either form
}

// attempts numbers a session's tries and knows which of them have not ended: the lowest of
// those is the floor that every request reports, below which the server refuses every try
// and forgets what it kept of them.
type attempts struct {
	mu   sync.Mutex
	last uint64
	open map[uint64]struct{} // tries not ended yet
}

// newAttempt starts a try for a lock, numbered in either form (see attempt): the numbered
// form once the client knows that the cluster numbers attempts.
func (s *Session) newAttempt(ctx context.Context) attempt {
	numbered := s.c.supports(ctx, featureAttemptNumbers)
	a := &s.attempts
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last++
	if a.open == nil {
		a.open = make(map[uint64]struct{})
	}
	a.open[a.last] = struct{}{}
	if !numbered {
		return attempt{id: "~" + strconv.FormatUint(a.last, 10), n: a.last}
	}
	return attempt{seq: a.last, n: a.last}
}

// endAttempt records that the try has ended: it holds nothing that a late request of it
// could take (it was granted and the hold is tracked, it left nothing behind, or its
// withdrawal is done), so the floor may pass it.
func (s *Session) endAttempt(t attempt) {
	a := &s.attempts
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.open, t.n)
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
	at      time.Time // when they were last read; zero while never read
	enabled []string  // sorted; a feature once seen enabled stays (see supports)
	stale   bool      // an answer showed more features enabled than enabled holds
}

// featureRecheck is how long the client trusts a list of features that lacks one it asks
// about, against a server that does not say on its answers how many features it has enabled
// (X-Raftlock-Features): the cluster enables a feature once its last member is upgraded, and
// a long-lived client should start using it then. A feature once enabled stays enabled.
const featureRecheck = 30 * time.Second

// supports reports whether the cluster has enabled the feature. It learns the cluster's
// features from the cluster (GET /v1/cluster, or /v1/health for a token without
// operator:read) the first time, and again once an answer showed that the cluster enabled
// more (sawFeatures), or featureRecheck after it last read them without the feature. A
// feature it saw enabled stays: a read that fails (during an election, say) or that a lagging
// node answers never takes it back; only an answer that the cluster lacks it does
// (forgetFeatures). While the features cannot be learned it reports false, and the caller
// uses the form that every version accepts.
func (c *Client) supports(ctx context.Context, feature string) bool {
	c.features.mu.Lock()
	at, enabled, stale := c.features.at, c.features.enabled, c.features.stale
	c.features.mu.Unlock()
	if slices.Contains(enabled, feature) {
		return true
	}
	if !at.IsZero() && !stale && time.Since(at) < featureRecheck {
		return false
	}
	read, err := c.clusterFeatures(ctx)
	if err != nil {
		c.logger.Debug("could not learn the cluster's features", "error", err)
		return false
	}
	c.features.mu.Lock()
	defer c.features.mu.Unlock()
	all := append(slices.Clone(c.features.enabled), read...)
	slices.Sort(all)
	c.features.at, c.features.enabled, c.features.stale = time.Now(), slices.Compact(all), false
	return slices.Contains(c.features.enabled, feature)
}

// sawFeatures notes the number of features that an answer says the cluster has enabled
// (X-Raftlock-Features): more than the client knows of means that the gate moved, and the
// client reads them again before its next try.
func (c *Client) sawFeatures(header string) {
	if header == "" {
		return
	}
	n, err := strconv.Atoi(header)
	if err != nil {
		return
	}
	c.features.mu.Lock()
	if !c.features.at.IsZero() && n > len(c.features.enabled) {
		c.features.stale = true
	}
	c.features.mu.Unlock()
}

// forgetFeatures makes the client learn the cluster's features again, after an answer that
// says the cluster lacks one it was believed to have.
func (c *Client) forgetFeatures() {
	c.features.mu.Lock()
	c.features.at, c.features.enabled, c.features.stale = time.Time{}, nil, false
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
