package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/api"
)

// ErrAlreadyBootstrapped refuses to start a node whose data directory holds no Raft state
// while the cluster still counts a member of its id that has run: its data was lost (a wiped
// disk, a new volume), and with it the log it acknowledged and the votes it gave. Under its old
// identity its empty log and forgotten vote could make a majority with a lagging member and
// elect a leader that lacks committed entries. It must come back as a new member: remove it
// (`raftlock members remove ID`), then start it with an empty data directory and --join.
var ErrAlreadyBootstrapped = errors.New("cluster: this member has already been bootstrapped")

// MemberView is what this node's own state says of member id (GET /v1/health?member=id):
// its suffrage in this node's latest Raft configuration (api.SuffrageVoter or
// api.SuffrageNonvoter, "" when the configuration does not name it), and whether it has run
// in this cluster (it published its HTTP address through the log). A node that lost its data
// asks the others this before it may bootstrap or join under its old id.
func (n *Node) MemberView(id string) (suffrage string, started bool) {
	for _, s := range n.raft.GetConfiguration().Configuration().Servers {
		if string(s.ID) == id {
			suffrage = api.SuffrageNonvoter
			if s.Suffrage == raft.Voter {
				suffrage = api.SuffrageVoter
			}
		}
	}
	if suffrage == "" {
		return "", false
	}
	m, ok := n.fsm.Member(id)
	return suffrage, ok && m.HTTPAddr != ""
}

// probeTimeout bounds the wait for one member's answer to checkNewMember's question.
const probeTimeout = 3 * time.Second

// checkNewMember refuses with ErrAlreadyBootstrapped to start this node, whose data directory
// holds no Raft state, when a member it can reach says the cluster already counts it: with
// an initial cluster (the other members listed, asked at their Raft ports, where agents serve
// the members' API too), when it names this id as a member that has run; with join
// endpoints, when it names this id as a voter. Members that do not answer say nothing: when
// none answers, an initial cluster is taken to be founded now (the one case a lost disk cannot
// be told from), and a join goes on to ask to be added, which refuses nothing a stopped
// cluster would not. A non-voter that lost its data may come back: it never voted, and it is
// promoted only once it has caught up with the log again.
func (n *Node) checkNewMember(ctx context.Context) error {
	if n.cfg.UnsafeSkipRejoinCheck {
		n.log.Warn("UNSAFE: not asking whether the cluster counts this node already (a test-only switch): a lost data dir comes back as a voter that forgot its votes")
		return nil
	}
	type target struct{ name, url string }
	var targets []target
	hc := n.httpc
	if len(n.cfg.InitialCluster) > 0 {
		// At their Raft ports, with the Raft port's TLS: the API there is the members'.
		scheme := "http://"
		if n.cfg.TLS.RaftClient != nil {
			scheme = "https://"
			hc = &http.Client{Transport: &http.Transport{TLSClientConfig: n.cfg.TLS.RaftClient.Clone(), DisableKeepAlives: true}}
			defer hc.CloseIdleConnections()
		}
		for id, addr := range n.cfg.InitialCluster {
			if id == n.cfg.ID {
				continue
			}
			if a, ok := n.cfg.PeerAddrs[id]; ok && a != "" {
				addr = a
			}
			targets = append(targets, target{id, scheme + addr + memberViewPath(n.cfg.ID)})
		}
	} else {
		for _, ep := range n.cfg.Join {
			targets = append(targets, target{ep, n.memberURL(ep, memberViewPath(n.cfg.ID))})
		}
	}
	if len(targets) == 0 {
		return nil
	}
	sort.Slice(targets, func(i, j int) bool { return targets[i].name < targets[j].name })
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	views := make([]*api.MemberView, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := n.fetchMemberView(ctx, hc, t.url)
			if err != nil {
				n.log.Debug("no answer about this node's membership", "member", t.name, "error", err)
				return
			}
			views[i] = v
		}()
	}
	wg.Wait()
	answered := 0
	for i, v := range views {
		if v == nil {
			continue
		}
		answered++
		bootstrapping := len(n.cfg.InitialCluster) > 0
		if bootstrapping && v.Started || !bootstrapping && v.Suffrage == api.SuffrageVoter {
			return fmt.Errorf("%w: %s says the cluster counts %s as a %s that has run, but this node's data directory %s "+
				"holds no Raft state: the data was lost, and with it the votes and the log it gave. Starting it under "+
				"the same id could elect a leader that lacks committed entries. To bring it back: raftlock members "+
				"remove %s (on a running member), then start it with an empty data directory and --join (not "+
				"--initial-cluster) as a new member", ErrAlreadyBootstrapped, targets[i].name, n.cfg.ID, orMember(v.Suffrage),
				n.cfg.DataDir, n.cfg.ID)
		}
	}
	if answered == 0 && len(n.cfg.InitialCluster) > 0 {
		n.log.Warn("no other member of the initial cluster answered: bootstrapping a new cluster. If this node's data "+
			"directory was lost rather than new, stop it now, remove it from the cluster and start it with --join",
			"asked", len(targets))
	}
	return nil
}

func orMember(suffrage string) string {
	if suffrage == "" {
		return "member"
	}
	return suffrage
}

// memberViewPath is the path of the question a node whose data directory is empty asks.
func memberViewPath(id string) string { return "/v1/health?member=" + url.QueryEscape(id) }

// fetchMemberView asks a member, at u (memberViewPath), what its state says of this node. An
// answer without the view (a version before it) is no answer.
func (n *Node) fetchMemberView(ctx context.Context, hc *http.Client, u string) (*api.MemberView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Close = true
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	var h api.Health
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 64<<10)).Decode(&h); err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	if h.Member == nil || h.Member.ID != n.cfg.ID {
		return nil, fmt.Errorf("%s: the answer has no view of member %s (an older version)", req.URL, n.cfg.ID)
	}
	return h.Member, nil
}
