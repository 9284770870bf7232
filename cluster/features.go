package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// ErrFeatureNotEnabled means a request needs a feature that the cluster has not enabled yet:
// some member does not support it (it runs an older version), so nothing that needs it may
// enter the log. Nothing was applied.
var ErrFeatureNotEnabled = errors.New("cluster: feature not enabled in this cluster yet")

// ErrIncompatible means a node that asked to join lacks a feature this cluster has enabled:
// it could not apply the log.
var ErrIncompatible = errors.New("cluster: the node lacks features this cluster uses")

// MemberReport is what a member last said of itself on its /v1/health: its version, the
// features it supports and how far it applied the log.
type MemberReport struct {
	Version      string
	Features     []fsm.Feature
	AppliedIndex uint64
	// Suffrage is the member's own view of its suffrage (api.SuffrageVoter or
	// api.SuffrageNonvoter), "" when its latest configuration does not name it.
	Suffrage string
	// LeaderIndex is the leader's last log index when it read the report: the member's lag
	// is LeaderIndex - AppliedIndex.
	LeaderIndex uint64
	// At is when the report was read.
	At time.Time
}

// Lag returns how many entries the member was behind the leader's last index.
func (r MemberReport) Lag() uint64 { return r.LeaderIndex - min(r.LeaderIndex, r.AppliedIndex) }

// gateCommand refuses, with ErrFeatureNotEnabled, a command that needs a feature the cluster
// has not enabled: some member may not know it, so it must not enter the log (see the feature
// gate in fsm/features.go).
func (n *Node) gateCommand(c *fsm.Command) error {
	if feature := c.MissingFeature(n.fsm.FeatureEnabled); feature != "" {
		return fmt.Errorf("%w: %q", ErrFeatureNotEnabled, feature)
	}
	return nil
}

// featureGate is the leader's side of rolling upgrades: it asks every member of the Raft
// configuration which features it supports (GET /v1/health of its published HTTP address)
// and, once all of them support a feature, proposes the EnableFeatures command that turns it
// on. Members it cannot reach, or that report no features (a version from before features),
// keep the gate shut, so no entry reaches a node that cannot apply it.
type featureGate struct {
	n        *Node
	interval time.Duration
	kick     chan struct{} // asks for a check now: leadership gained, members changed
	// settled says that this node's last check, as leader, heard from every member and found
	// nothing left to enable: the cluster serves by the newest rules all members support.
	settled atomic.Bool

	mu      sync.Mutex
	reports map[string]MemberReport // by member id; only the leader keeps them current
}

// DefaultFeatureCheckInterval is how often a leader asks the members what they support.
const DefaultFeatureCheckInterval = 2 * time.Second

func newFeatureGate(n *Node, interval time.Duration) *featureGate {
	return &featureGate{n: n, interval: interval, kick: make(chan struct{}, 1), reports: map[string]MemberReport{}}
}

// poke asks for a check soon, without waiting for the next tick.
func (g *featureGate) poke() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// observe pokes the gate when the published members change: a member that just published its
// HTTP address can be asked what it supports.
func (g *featureGate) observe(events []fsm.Event) {
	for _, e := range events {
		if e.Kind == fsm.EventMembersChanged {
			g.poke()
			return
		}
	}
}

// run checks the members now and then while this node leads, until ctx ends.
func (g *featureGate) run(ctx context.Context) {
	defer g.n.wg.Done()
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		if g.n.IsLeader() {
			g.check(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-g.kick:
		}
	}
}

// check reads every member's report and enables the features all of them support.
func (g *featureGate) check(ctx context.Context) {
	common, complete := g.common(ctx)
	enabled := g.n.fsm.Features()
	missing := slices.DeleteFunc(common, func(f fsm.Feature) bool { return slices.Contains(enabled, f) })
	g.settled.Store(complete && len(missing) == 0)
	if !complete || len(missing) == 0 || !g.n.IsLeader() {
		return
	}
	slices.Sort(missing)
	pctx, cancel := context.WithTimeout(ctx, g.n.cfg.ApplyTimeout)
	defer cancel()
	if _, err := g.n.propose(pctx, &fsm.Command{Type: fsm.TypeEnableFeatures, Features: missing}); err != nil {
		g.n.log.Warn("could not enable features every member supports", "features", missing, "error", err)
		return
	}
	g.n.log.Info("enabled features that every member supports", "features", missing)
	g.settled.Store(true)
}

// gateSettled reports whether the cluster serves by the rules of every feature its members
// all support, as readiness needs (see Ready): once the cluster has enabled any feature (the
// gate's first EnableFeatures holds everything all members supported then, so a cluster
// founded by one version has all of its features from then on); before, once the leader's
// gate found nothing to enable (members of a version from before features), which a follower
// asks of the leader's /v1/ready.
func (n *Node) gateSettled(ctx context.Context) bool {
	if n.fsm.FeatureCount() > 0 {
		return true
	}
	if n.IsLeader() {
		return n.gate.settled.Load()
	}
	_, addr := n.Leader()
	if addr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.memberURL(addr, "/v1/ready"), nil)
	if err != nil {
		return false
	}
	req.Close = true // as fetchReport: no idle connection held between probes
	resp, err := n.httpc.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// common asks every member of the Raft configuration for its report now and returns the
// features all of them support; complete is false if a member did not answer.
func (g *featureGate) common(ctx context.Context) (common []fsm.Feature, complete bool) {
	f := g.n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, false
	}
	complete = true
	for i, s := range f.Configuration().Servers {
		rep, err := g.report(ctx, s)
		if err != nil {
			g.n.log.Debug("feature check: no report from a member", "member", s.ID, "error", err)
			complete = false
			continue
		}
		if i == 0 {
			common = slices.Clone(rep.Features)
		} else {
			common = slices.DeleteFunc(slices.Clone(common), func(f fsm.Feature) bool { return !slices.Contains(rep.Features, f) })
		}
	}
	return common, complete
}

// report returns the member's report, reading it from the member unless it is this node.
func (g *featureGate) report(ctx context.Context, s raft.Server) (MemberReport, error) {
	var rep MemberReport
	var err error
	if string(s.ID) == g.n.cfg.ID {
		rep = g.n.selfReport()
	} else {
		m, ok := g.n.fsm.Member(string(s.ID))
		if !ok || m.HTTPAddr == "" {
			return rep, errors.New("its HTTP address is not published yet")
		}
		if rep, err = g.n.fetchReport(ctx, m.HTTPAddr); err != nil {
			return rep, err
		}
	}
	return g.record(string(s.ID), rep), nil
}

// record keeps rep, just read, as member id's last report, and returns it with the leader's
// last index.
func (g *featureGate) record(id string, rep MemberReport) MemberReport {
	rep.LeaderIndex = g.n.raft.LastIndex()
	g.mu.Lock()
	g.reports[id] = rep
	g.mu.Unlock()
	return rep
}

// lastReport returns the member's last report, if the gate has one.
func (g *featureGate) lastReport(id string) (MemberReport, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.reports[id]
	return r, ok
}

// selfReport is this node's own report.
func (n *Node) selfReport() MemberReport {
	return MemberReport{Version: n.cfg.Version, Features: n.fsm.KnownFeatures(), AppliedIndex: n.fsm.AppliedIndex(),
		Suffrage: n.OwnSuffrage(), At: time.Now()}
}

// SupportedFeatures returns the features this node can apply, sorted.
func (n *Node) SupportedFeatures() []fsm.Feature { return n.fsm.KnownFeatures() }

// Version returns the version this node reports.
func (n *Node) Version() string { return n.cfg.Version }

// FeatureEnabled reports whether the cluster has enabled the feature, as this node applied it.
func (n *Node) FeatureEnabled(f fsm.Feature) bool { return n.fsm.FeatureEnabled(f) }

// fetchReport reads the /v1/health of the member whose API is at endpoint.
func (n *Node) fetchReport(ctx context.Context, endpoint string) (MemberReport, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.memberURL(endpoint, "/v1/health"), nil)
	if err != nil {
		return MemberReport{}, err
	}
	// No idle connection is kept between checks: it would hold one of the member's
	// --max-connections for good.
	req.Close = true
	resp, err := n.httpc.Do(req)
	if err != nil {
		return MemberReport{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return MemberReport{}, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	var h api.Health
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<10)).Decode(&h); err != nil {
		return MemberReport{}, fmt.Errorf("%s: %w", req.URL, err)
	}
	rep := MemberReport{Version: h.Version, AppliedIndex: h.AppliedIndex, Suffrage: h.Suffrage, At: time.Now()}
	for _, f := range h.Features {
		rep.Features = append(rep.Features, fsm.Feature(f))
	}
	return rep, nil
}

// checkCompatible refuses a node that is to join, reachable at httpAddr, if it lacks a feature
// the cluster has enabled. A node that cannot be reached yet is let in: should it be too old,
// it stops at the first entry it cannot apply, and says so in its log.
func (n *Node) checkCompatible(ctx context.Context, id, httpAddr string) error {
	enabled := n.fsm.Features()
	if len(enabled) == 0 {
		return nil
	}
	rep, err := n.fetchReport(ctx, httpAddr)
	if err != nil {
		n.log.Warn("adding a member whose features could not be read", "member", id, "error", err)
		return nil
	}
	var lacks []fsm.Feature
	for _, f := range enabled {
		if !slices.Contains(rep.Features, f) {
			lacks = append(lacks, f)
		}
	}
	if len(lacks) > 0 {
		return fmt.Errorf("%w: %s (version %q) lacks %v: upgrade it before it joins", ErrIncompatible, id, rep.Version, lacks)
	}
	return nil
}
