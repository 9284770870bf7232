package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// MemberInfo describes one member of the Raft configuration with its published HTTP address.
type MemberInfo struct {
	ID       string
	RaftAddr string
	HTTPAddr string
	Voter    bool
	Leader   bool
	// Report is what the member last told the leader of itself; nil on other nodes, and
	// before the leader's first feature check.
	Report *MemberReport
}

// Status is a node's view of the cluster.
type Status struct {
	Leader       string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64
	State        string
	Members      []MemberInfo
	// LogStore is the kind of this node's Raft log store (LogStoreBoltDB or LogStoreWAL).
	LogStore string
	// Features are the features the cluster has enabled, as this node applied the log.
	Features []fsm.Feature
}

// Status returns this node's view of the cluster: leader, term, indexes and members.
func (n *Node) Status() (Status, error) {
	members, err := n.Members()
	if err != nil {
		return Status{}, err
	}
	_, leader := n.raft.LeaderWithID()
	return Status{
		Leader:       string(leader),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		State:        n.raft.State().String(),
		Members:      members,
		LogStore:     n.cfg.LogStore,
		Features:     n.fsm.Features(),
	}, nil
}

// Members returns the Raft configuration, sorted by id, with each member's HTTP address.
func (n *Node) Members() ([]MemberInfo, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("cluster: configuration: %w", err)
	}
	published := make(map[string]fsm.Member)
	for _, m := range n.fsm.Members() {
		published[m.ID] = m
	}
	_, leader := n.raft.LeaderWithID()
	var out []MemberInfo
	leading := n.IsLeader()
	for _, s := range f.Configuration().Servers {
		m := MemberInfo{
			ID:       string(s.ID),
			RaftAddr: string(s.Address),
			HTTPAddr: published[string(s.ID)].HTTPAddr,
			Voter:    s.Suffrage == raft.Voter,
			Leader:   s.ID == leader,
		}
		if rep, ok := n.gate.lastReport(m.ID); ok && leading {
			m.Report = &rep
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// AddMember adds a voter, or only records its HTTP address when a member with that id and Raft
// address already exists (whatever its suffrage: a non-voter stays one until promoted). An
// existing id with another Raft address, or a Raft address another member has, is refused
// with ErrMemberConflict: either would move a voter (its votes and its log) to another
// process. A new voter counts towards the quorum at once, even while it catches up:
// AddNonvoter, then PromoteMember, does not risk that.
func (n *Node) AddMember(ctx context.Context, id, raftAddr, httpAddr string) error {
	return n.addMember(ctx, id, raftAddr, httpAddr, true)
}

// AddNonvoter adds a non-voter, which replicates the log but does not vote until promoted
// (PromoteMember), or only records its HTTP address when a member with that id and Raft
// address already exists.
func (n *Node) AddNonvoter(ctx context.Context, id, raftAddr, httpAddr string) error {
	return n.addMember(ctx, id, raftAddr, httpAddr, false)
}

func (n *Node) addMember(ctx context.Context, id, raftAddr, httpAddr string, voter bool) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return applyError(err)
	}
	present, err := memberPresent(f.Configuration(), id, raftAddr)
	if err != nil {
		return err
	}
	if err := n.httpAddrFree(f.Configuration(), id, httpAddr); err != nil {
		return err
	}
	if !present {
		if err := n.checkCompatible(ctx, id, httpAddr); err != nil {
			n.log.Warn("refused a node that asked to join: it lacks features this cluster has enabled and could not "+
				"apply the log; upgrade it to the version the members run", "member", id, "http_addr", httpAddr, "error", err)
			return err
		}
		change := n.raft.AddNonvoter
		if voter {
			change = n.raft.AddVoter
		}
		if err := change(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.cfg.ApplyTimeout).Error(); err != nil {
			return configChangeError(err)
		}
		n.log.Info("added a member", "member", id, "raft_addr", raftAddr, "voter", voter)
		n.warnEvenVoters()
	}
	m := fsm.Member{ID: id, RaftAddr: raftAddr, HTTPAddr: httpAddr}
	if have, ok := n.fsm.Member(id); ok && have == m {
		return nil
	}
	_, err = n.propose(ctx, &fsm.Command{Type: fsm.TypeSetMember, Member: m})
	return err
}

// memberPresent says whether the configuration has a member with this id and Raft address,
// or refuses with ErrMemberConflict when it has this id at another address, or this address
// under another id: raft would replace the first member's address, or let the process at the
// address vote under the new id, with the votes and log it gave as the old one.
func memberPresent(c raft.Configuration, id, raftAddr string) (bool, error) {
	for _, s := range c.Servers {
		switch sameID, sameAddr := string(s.ID) == id, string(s.Address) == raftAddr; {
		case sameID && sameAddr:
			return true, nil
		case sameID:
			return false, fmt.Errorf("%w: %s is a member at Raft address %s, not %s: to move it, remove it "+
				"(raftlock members remove %s) and add it again with an empty data directory", ErrMemberConflict, id, s.Address, raftAddr, id)
		case sameAddr:
			return false, fmt.Errorf("%w: Raft address %s is member %s's: the process there would vote as %s "+
				"with what it promised as %s; remove %s first, or give the new member an address of its own",
				ErrMemberConflict, raftAddr, s.ID, id, s.ID, s.ID)
		}
	}
	return false, nil
}

// httpAddrFree refuses with ErrMemberConflict when another member of the configuration has
// published httpAddr: requests forwarded to one would reach the other.
func (n *Node) httpAddrFree(c raft.Configuration, id, httpAddr string) error {
	for _, s := range c.Servers {
		if string(s.ID) == id {
			continue
		}
		if m, ok := n.fsm.Member(string(s.ID)); ok && m.HTTPAddr == httpAddr {
			return fmt.Errorf("%w: HTTP address %s is member %s's; give the new member an address of its own",
				ErrMemberConflict, httpAddr, s.ID)
		}
	}
	return nil
}

// RemoveMember removes a member from the configuration and forgets its metadata.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	members, err := n.Members()
	if err != nil {
		return err
	}
	found, otherVoters := false, 0
	for _, m := range members {
		found = found || m.ID == id
		if m.ID != id && m.Voter {
			otherVoters++
		}
	}
	if !found {
		return fmt.Errorf("%w %q", ErrUnknownMember, id)
	}
	if otherVoters == 0 {
		return fmt.Errorf("%w: %s is the cluster's only voter: removing it would leave no member that can elect a leader; "+
			"add (and promote) another member first", ErrMembershipRefused, id)
	}
	if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.cfg.ApplyTimeout).Error(); err != nil {
		return configChangeError(err)
	}
	if id == n.cfg.ID {
		return nil // we are no longer a voter, so we cannot commit the metadata change
	}
	_, err = n.propose(ctx, &fsm.Command{Type: fsm.TypeRemoveMember, Member: fsm.Member{ID: id}})
	return err
}

// TransferLeadership hands leadership to the member id, or to the most up-to-date follower
// when id is empty, and waits until the transfer completes.
func (n *Node) TransferLeadership(ctx context.Context, id string) error {
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		members, err := n.Members()
		if err != nil {
			return err
		}
		var addr string
		voter := false
		for _, m := range members {
			if m.ID == id {
				addr, voter = m.RaftAddr, m.Voter
			}
		}
		switch {
		case addr == "":
			return fmt.Errorf("%w %q", ErrUnknownMember, id)
		case id == n.cfg.ID:
			return fmt.Errorf("%w: %s leads already", ErrMembershipRefused, id)
		case !voter:
			return fmt.Errorf("%w: %s is a non-voter, which cannot lead: promote it first (raftlock members promote %s)",
				ErrMembershipRefused, id, id)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr))
	}
	switch done, err := await(ctx, f); {
	case !done:
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	case err != nil:
		return fmt.Errorf("cluster: leadership transfer: %w", err)
	}
	return nil
}

// Join asks a running cluster, through any member's HTTP API, to add this node as a
// non-voter, and retries until it succeeds or ctx ends. Once added, the node asks the leader
// in the background to promote it to a voter, which the leader does once the node has caught
// up with the log (PromoteMember): a new, empty or slow node never counts towards the quorum
// before it could vote usefully. A cluster of a version without non-voters adds it as a voter
// at once.
func (n *Node) Join(ctx context.Context, endpoints []string) error {
	err := n.announce(ctx, endpoints, api.SuffrageNonvoter)
	if errors.Is(err, errNoSuffrage) {
		n.log.Warn("the cluster does not know non-voters (an older version): joining as a voter at once")
		return n.announce(ctx, endpoints, "")
	}
	if err != nil {
		return err
	}
	n.wg.Add(1)
	go n.promoteLoop(endpoints)
	return nil
}

// announce posts this node's id and addresses to the cluster (which adds it with suffrage,
// voter when empty, or just records its HTTP address when it is already a member), trying
// each endpoint in turn until one accepts or ctx ends.
func (n *Node) announce(ctx context.Context, endpoints []string, suffrage string) error {
	body, err := json.Marshal(api.AddMemberRequest{ID: n.cfg.ID, RaftAddr: string(n.trans.LocalAddr()),
		HTTPAddr: n.cfg.AdvertiseHTTP, Suffrage: suffrage})
	if err != nil {
		return err
	}
	var last error
	var told time.Time
	for attempt := 0; ; attempt++ {
		for _, ep := range endpoints {
			if last = n.postMember(ctx, ep, body); last == nil {
				return nil
			} else if errors.Is(last, errRefused) || errors.Is(last, errNoSuffrage) || errors.Is(last, ErrMemberConflict) ||
				errors.Is(last, ErrIncompatible) {
				if !errors.Is(last, errNoSuffrage) {
					n.log.Error("the cluster refused this node's request to join; asking again will not help", "error", last)
				}
				return fmt.Errorf("cluster: join: %w", last) // asking again will not help
			}
		}
		// Say why at once, and again now and then, rather than only when the join gives up.
		if time.Since(told) >= joinRetryLog {
			n.log.Warn("asking the cluster to add this node failed; retrying", "endpoints", endpoints, "error", last)
			told = time.Now()
		} else {
			n.log.Debug("announcing to the cluster failed; retrying", "error", last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: join: %w (last error: %w)", ctx.Err(), last)
		case <-time.After(backoff(attempt)):
		}
	}
}

// joinRetryLog is how often a join that keeps failing says so at WARN.
const joinRetryLog = 30 * time.Second

// errRefused marks a member request the API refused for its token (401 or 403).
var errRefused = errors.New("refused: the agent's token is missing or lacks operator:write")

// newHTTPClient returns the client of the node's own requests to other members' APIs; with
// tlsConfig, they go over HTTPS.
func newHTTPClient(tlsConfig *tls.Config) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = tlsConfig
	t.ForceAttemptHTTP2 = false
	// One connection per member: these requests are few and short. With more, two requests
	// at once (the feature gate's and a promotion check's) make the transport dial a second
	// connection that the first one's return leaves unused; the member's server counts a
	// connection that never sent a request as busy for 5 s, which held its graceful
	// shutdown past its deadline.
	t.MaxConnsPerHost = 1
	return &http.Client{Timeout: 10 * time.Second, Transport: t}
}

// memberURL turns a member's API endpoint (host:port, or a URL) and a path into a URL; an
// endpoint without a scheme gets https when the node speaks TLS to other members.
func (n *Node) memberURL(endpoint, path string) string {
	endpoint = strings.TrimSuffix(endpoint, "/")
	if !strings.Contains(endpoint, "://") {
		scheme := "http://"
		if n.cfg.TLS.HTTPClient != nil {
			scheme = "https://"
		}
		endpoint = scheme + endpoint
	}
	return endpoint + path
}

func (n *Node) postMember(ctx context.Context, endpoint string, body []byte) error {
	url := n.memberURL(endpoint, "/v1/cluster/members")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	setToken(req, n.cfg.Token)
	resp, err := n.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb api.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		switch {
		case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%s: %w: %s %s", url, errRefused, resp.Status, eb.Error.Message)
		case resp.StatusCode == http.StatusBadRequest && strings.Contains(eb.Error.Message, "suffrage"):
			return fmt.Errorf("%s: %w: %s", url, errNoSuffrage, eb.Error.Message)
		case resp.StatusCode == http.StatusConflict && eb.Error.Code == api.CodeMemberConflict:
			return fmt.Errorf("%s: %w: %s", url, ErrMemberConflict, eb.Error.Message)
		case resp.StatusCode == http.StatusConflict && eb.Error.Code == api.CodeIncompatible:
			return fmt.Errorf("%s: %w: %s (this node runs %q)", url, ErrIncompatible, eb.Error.Message, n.cfg.Version)
		}
		return fmt.Errorf("%s: %s %s", url, resp.Status, eb.Error.Message)
	}
	return nil
}

// errNoSuffrage marks a cluster that refused the suffrage field: a version without non-voters.
var errNoSuffrage = errors.New("the cluster does not know the suffrage field")

// setToken adds the agent's ACL token, if it has one, to a request to another member.
func setToken(req *http.Request, token string) {
	if token != "" {
		req.Header.Set(api.HeaderToken, token)
	}
}

func backoff(attempt int) time.Duration {
	d := 100 * time.Millisecond << min(attempt, 4)
	return d
}

// publishLoop keeps this follower's HTTP address recorded in the log: whenever it is missing or
// stale and a leader is known, it announces itself to the leader. It returns when the node closes.
func (n *Node) publishLoop(ctx context.Context) {
	defer n.wg.Done()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		if !n.isPublished() && n.inConfiguration() && !n.IsRemoved() {
			if id, addr := n.Leader(); id != "" && id != n.cfg.ID && addr != "" {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := n.announce(actx, []string{addr}, "")
				cancel()
				if err != nil && !errors.Is(err, context.Canceled) {
					n.log.Debug("publishing own address failed", "error", err)
				}
				if errors.Is(err, errRefused) || errors.Is(err, ErrMemberConflict) {
					// ACLs are on and this agent has no token for it, or another member has
					// this node's address: asking four times a second would only fill the
					// logs. The address is published anyway once this node leads.
					if errors.Is(err, ErrMemberConflict) {
						n.log.Warn("the cluster refused to record this node's addresses", "error", err)
					} else {
						n.log.Warn("the cluster refused to record this node's HTTP address: give the agent a token with operator:write (--agent-token)")
					}
					select {
					case <-ctx.Done():
						return
					case <-n.stop:
						return
					case <-time.After(refusedRetry):
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-n.stop:
			return
		case <-t.C:
		}
	}
}

// refusedRetry is how long a follower waits before asking again to publish its address after
// the cluster refused its token.
const refusedRetry = time.Minute

func (n *Node) isPublished() bool {
	m, ok := n.fsm.Member(n.cfg.ID)
	return ok && m.HTTPAddr == n.cfg.AdvertiseHTTP && m.RaftAddr == string(n.trans.LocalAddr())
}

func sortServers(s []raft.Server) {
	sort.Slice(s, func(i, j int) bool { return s[i].ID < s[j].ID })
}

// Leave removes this node from the cluster for good: a leader first hands leadership over,
// then the node asks the leader to remove it. Close the node afterwards.
func (n *Node) Leave(ctx context.Context) error {
	if n.raft.State() == raft.Leader {
		if !n.hasOtherVoters() {
			return errors.New("cluster: the last voter cannot leave")
		}
		if err := n.TransferLeadership(ctx, ""); err != nil {
			return err
		}
	}
	for attempt := 0; ; attempt++ {
		_, addr := n.Leader()
		err := errors.New("no leader known")
		if addr != "" {
			err = n.deleteMember(ctx, addr, n.cfg.ID)
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: leave: %w (last error: %w)", ctx.Err(), err)
		case <-time.After(backoff(attempt)):
		}
	}
}

func (n *Node) deleteMember(ctx context.Context, endpoint, id string) error {
	url := n.memberURL(endpoint, "/v1/cluster/members/"+id)
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, url, nil)
	if err != nil {
		return err
	}
	setToken(req, n.cfg.Token)
	resp, err := n.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}
