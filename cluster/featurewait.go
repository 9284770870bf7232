package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// FeatureWait is the longest a request that needs a feature the cluster has not enabled yet
// waits for the leader to enable it, when no member is known to lack it: a new cluster whose
// leader has not asked every member yet, or the seconds after the last member of a rolling
// upgrade restarted. Past it (or the request's own deadline), the request fails with
// ErrFeatureNotEnabled and a message that says which case it is.
const FeatureWait = 5 * time.Second

// awaitFeatures returns nil once the cluster has enabled every feature in fs, as this node
// applied the log. A feature that a member is known to lack (its last report to the gate
// does not name it), or that this node does not know, fails at once; otherwise it waits for
// the gate, at most FeatureWait and while ctx lasts. Its error wraps ErrFeatureNotEnabled and
// tells "not enabled yet" (every member supports it) from "a member lacks it".
func (n *Node) awaitFeatures(ctx context.Context, fs []fsm.Feature) error {
	missing := n.missingFeatures(fs)
	if len(missing) == 0 {
		return nil
	}
	if unknown := n.fsm.UnknownFeatures(missing); len(unknown) > 0 {
		return fmt.Errorf("%w: %s not enabled: a member lacks it: this node, %s (version %q), does not support it; upgrade every member first",
			ErrFeatureNotEnabled, featureList(unknown), n.cfg.ID, n.cfg.Version)
	}
	if why := n.gate.lacking(n.servers(), missing, nil); why != "" {
		return fmt.Errorf("%w: %s", ErrFeatureNotEnabled, why)
	}
	wctx, cancel := context.WithTimeout(ctx, FeatureWait)
	defer cancel()
	for {
		changed := n.gate.changed()
		if missing = n.missingFeatures(missing); len(missing) == 0 {
			return nil
		}
		n.gate.poke()
		select {
		case <-changed:
			continue
		case <-n.stop:
			return fmt.Errorf("%w: %w", ErrNotLeader, ErrShutdown)
		case <-wctx.Done():
		}
		break
	}
	// Say why: ask every member now (briefly, even if the request's own time is up).
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if why := n.gate.lacking(n.servers(), missing, func(s raft.Server) (MemberReport, error) { return n.gate.report(actx, s) }); why != "" {
		return fmt.Errorf("%w: %s", ErrFeatureNotEnabled, why)
	}
	return fmt.Errorf("%w: %s not enabled yet: every member supports it, and the leader enables it within seconds of "+
		"hearing from all of them; ask again", ErrFeatureNotEnabled, featureList(missing))
}

// missingFeatures returns the features of fs the cluster has not enabled.
func (n *Node) missingFeatures(fs []fsm.Feature) []fsm.Feature {
	return slices.DeleteFunc(slices.Clone(fs), n.fsm.FeatureEnabled)
}

// servers returns the members of the latest Raft configuration, nil if it cannot be read.
func (n *Node) servers() []raft.Server {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	return f.Configuration().Servers
}

// lacking says which member lacks one of the features fs, or did not answer, or "" if none:
// with ask nil, from the gate's last reports only (a member without a report is not known to
// lack anything); with ask, from what ask returns for each member.
func (g *featureGate) lacking(servers []raft.Server, fs []fsm.Feature, ask func(raft.Server) (MemberReport, error)) string {
	var lack, silent []string
	for _, s := range servers {
		var rep MemberReport
		if ask == nil {
			var ok bool
			if rep, ok = g.lastReport(string(s.ID)); !ok {
				continue
			}
		} else {
			var err error
			if rep, err = ask(s); err != nil {
				silent = append(silent, fmt.Sprintf("member %s did not say whether it supports it (%v)", s.ID, err))
				continue
			}
		}
		var lacks []fsm.Feature
		for _, f := range fs {
			if !slices.Contains(rep.Features, f) {
				lacks = append(lacks, f)
			}
		}
		if len(lacks) > 0 {
			lack = append(lack, fmt.Sprintf("member %s (version %q) does not support %s", s.ID, rep.Version, featureList(lacks)))
		}
	}
	switch {
	case len(lack) > 0:
		return fmt.Sprintf("%s not enabled: a member lacks it: %s; upgrade every member first",
			featureList(fs), strings.Join(append(lack, silent...), "; "))
	case len(silent) > 0:
		return fmt.Sprintf("%s not enabled yet: %s; the leader enables it once every member has said it supports it",
			featureList(fs), strings.Join(silent, "; "))
	}
	return ""
}

// featureList names features for a message: feature "a", features "a", "b".
func featureList(fs []fsm.Feature) string {
	q := make([]string, len(fs))
	for i, f := range fs {
		q[i] = fmt.Sprintf("%q", f)
	}
	if len(fs) == 1 {
		return "feature " + q[0]
	}
	return "features " + strings.Join(q, ", ")
}
