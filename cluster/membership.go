package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// ErrNotCaughtUp means a non-voter cannot be promoted yet: it does not answer, hears no
// leader, or is further behind the leader's log than TrailingLogs. Nothing was changed.
var ErrNotCaughtUp = errors.New("cluster: the member has not caught up with the log")

// PromoteMember makes the non-voter id a voter, once it has caught up: its own configuration
// names it (so it has received the log up to its addition), it answers its /v1/ready (it
// hears the leader and has applied what it knows committed), and the last index it applied is
// within TrailingLogs of the leader's last index. A voter is left as it is.
func (n *Node) PromoteMember(ctx context.Context, id string) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return applyError(err)
	}
	var server *raft.Server
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			server = &s
		}
	}
	switch {
	case server == nil:
		return fmt.Errorf("%w %q", ErrUnknownMember, id)
	case server.Suffrage == raft.Voter:
		return nil
	}
	if err := n.caughtUp(ctx, id); err != nil {
		return err
	}
	if err := n.raft.AddVoter(server.ID, server.Address, 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return configChangeError(err)
	}
	n.log.Info("promoted a non-voter that caught up", "member", id)
	n.warnEvenVoters()
	return nil
}

// caughtUp says why member id is not ready to vote, or nil if it is.
func (n *Node) caughtUp(ctx context.Context, id string) error {
	m, ok := n.fsm.Member(id)
	if !ok || m.HTTPAddr == "" {
		return fmt.Errorf("%w: %s has not published its HTTP address yet", ErrNotCaughtUp, id)
	}
	rep, err := n.fetchReport(ctx, m.HTTPAddr)
	if err != nil {
		return fmt.Errorf("%w: %s does not answer: %w", ErrNotCaughtUp, id, err)
	}
	n.gate.record(id, rep)
	if rep.Suffrage == "" {
		return fmt.Errorf("%w: %s has not received the log up to its own addition yet", ErrNotCaughtUp, id)
	}
	if err := n.fetchReady(ctx, m.HTTPAddr); err != nil {
		return fmt.Errorf("%w: %s is not ready: %w", ErrNotCaughtUp, id, err)
	}
	last := n.raft.LastIndex()
	if lag := last - min(last, rep.AppliedIndex); lag > n.cfg.TrailingLogs {
		return fmt.Errorf("%w: %s is %d entries behind the leader (at most %d, --trailing-logs)", ErrNotCaughtUp, id, lag, n.cfg.TrailingLogs)
	}
	return nil
}

// fetchReady asks the member whose API is at endpoint whether it is ready.
func (n *Node) fetchReady(ctx context.Context, endpoint string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.memberURL(endpoint, "/v1/ready"), nil)
	if err != nil {
		return err
	}
	resp, err := n.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

// VoterWarning describes what the current number of voters costs, or returns "" when it is
// odd: with an even number, a majority is one more than with one voter fewer, so the cluster
// tolerates no more failures and every commit waits for one more node.
func (n *Node) VoterWarning() string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters == 0 || voters%2 == 1 {
		return ""
	}
	return fmt.Sprintf("the cluster has %d voters: a majority is %d, so it survives the loss of %d, no more than with %d voters, "+
		"and every commit waits for one more node; add or remove a voter to make the number odd",
		voters, voters/2+1, (voters-1)/2, voters-1)
}

func (n *Node) warnEvenVoters() {
	if w := n.VoterWarning(); w != "" {
		n.log.Warn(w)
	}
}

// promoteLoop asks the cluster to promote this node, a non-voter that just joined, until the
// leader answers that it is a voter, the cluster refuses for good, or the node closes. It
// does not take its own configuration's word for it: a node that joins again under an id the
// cluster used before (a lost disk replaced twice) catches up through entries, or a snapshot,
// that named it a voter before it was removed and added again as a non-voter, and would stop
// asking too soon (the leader answers a voter's promotion at once).
func (n *Node) promoteLoop(endpoints []string) {
	defer n.wg.Done()
	ctx := n.loops
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		targets := endpoints
		if id, addr := n.Leader(); id != "" && id != n.cfg.ID && addr != "" {
			targets = []string{addr}
		}
		for _, ep := range targets {
			warning, err := n.postPromote(ctx, ep)
			if err == nil {
				n.log.Info("promoted to a voter, having caught up with the log")
				if warning != "" {
					n.log.Warn(warning)
				}
				return
			}
			if errors.Is(err, ErrUnknownMember) {
				// Either the leader's configuration does not have this node (it was removed
				// before it caught up, or the change that added it was lost), or the node
				// asked has no promote endpoint (a version before it, in a rolling
				// upgrade): the leader's configuration tells which.
				if member, known := n.leaderNamesMe(ctx); known && !member {
					n.markRemoved("the leader's configuration does not name it", 0)
					return
				}
			}
			if errors.Is(err, errRefused) {
				n.log.Warn("the cluster refused to promote this node to a voter; it stays a non-voter", "error", err)
				return
			}
			n.log.Debug("not promoted yet", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// OwnSuffrage returns this node's suffrage in its own latest configuration (api.SuffrageVoter
// or api.SuffrageNonvoter), or "" when that configuration does not name it.
func (n *Node) OwnSuffrage() string {
	for _, s := range n.raft.GetConfiguration().Configuration().Servers {
		if string(s.ID) == n.cfg.ID {
			if s.Suffrage == raft.Voter {
				return api.SuffrageVoter
			}
			return api.SuffrageNonvoter
		}
	}
	return ""
}

// inConfiguration says whether this node is in its latest configuration.
func (n *Node) inConfiguration() bool {
	for _, s := range n.raft.GetConfiguration().Configuration().Servers {
		if string(s.ID) == n.cfg.ID {
			return true
		}
	}
	return false
}

// postPromote asks the member at endpoint to promote this node, and returns the answer's
// warning (an even number of voters).
func (n *Node) postPromote(ctx context.Context, endpoint string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := n.memberURL(endpoint, "/v1/cluster/members/"+n.cfg.ID+"/promote")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return "", err
	}
	setToken(req, n.cfg.Token)
	resp, err := n.httpc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		var mr api.MembersResponse
		_ = json.NewDecoder(resp.Body).Decode(&mr)
		return mr.Warning, nil
	}
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return "", fmt.Errorf("%s: %w: %s", url, errRefused, eb.Error.Message)
	case http.StatusNotFound:
		return "", fmt.Errorf("%s: %w: %s", url, ErrUnknownMember, eb.Error.Message)
	}
	return "", fmt.Errorf("%s: %s %s", url, resp.Status, eb.Error.Message)
}

// pruneMembers forgets the published metadata of members no longer in the Raft configuration
// (those `raftlock recover` left out, say), so that the gate and GET /v1/cluster do not
// look for them. Run by a new leader.
func (n *Node) pruneMembers(ctx context.Context) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	in := make(map[string]bool)
	for _, s := range f.Configuration().Servers {
		in[string(s.ID)] = true
	}
	for _, m := range n.fsm.Members() {
		if in[m.ID] {
			continue
		}
		if _, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeRemoveMember, Member: fsm.Member{ID: m.ID}}); err != nil {
			n.log.Debug("could not forget a former member's address", "member", m.ID, "error", err)
			return
		}
	}
}
