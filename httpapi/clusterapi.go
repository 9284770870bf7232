package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

func (s *Server) getCluster(c echo.Context) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	if wantsEventStream(c.Request()) {
		return s.streamView(c, q, "cluster", s.clusterView)
	}
	return s.read(c, q, func() error {
		view, err := s.clusterView(c)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, view)
	})
}

// clusterView is the answer to GET /v1/cluster, for a caller with operator:read.
func (s *Server) clusterView(c echo.Context) (any, error) {
	if err := s.callerOperator(c, fsm.AccessRead); err != nil {
		return nil, err
	}
	st, err := s.node.Status()
	if err != nil {
		return nil, fromClusterError(err)
	}
	return api.Cluster{
		Version:      s.cfg.Version,
		Leader:       st.Leader,
		Term:         st.Term,
		CommitIndex:  st.CommitIndex,
		AppliedIndex: st.AppliedIndex,
		Members:      membersBody(st.Members),
		LogStore:     st.LogStore,
		Features:     featureNames(st.Features),
	}, nil
}

func (s *Server) addMember(c echo.Context) error {
	var req api.AddMemberRequest
	if err := s.decodeBody(c, &req, false); err != nil {
		return err
	}
	switch {
	case req.ID == "" || len(req.ID) > 128 || strings.ContainsAny(req.ID, " \t\r\n/"):
		return invalid("id is required: 1–128 characters without spaces or '/'")
	case !hostPort(req.RaftAddr):
		return invalid("raft_addr %q is not a host:port address", req.RaftAddr)
	case !hostPort(req.HTTPAddr):
		return invalid("http_addr %q is not a host:port address", req.HTTPAddr)
	}
	voter, err := suffrageVoter(req.Suffrage)
	if err != nil {
		return err
	}
	return s.atLeader(c, func() error {
		publication := false
		if err := s.callerOperator(c, fsm.AccessWrite); err != nil {
			if !s.firstPublication(req) {
				return err
			}
			publication = true
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		add := s.node.AddMember
		if !voter {
			add = s.node.AddNonvoter
		}
		if err := add(ctx, req.ID, req.RaftAddr, req.HTTPAddr); err != nil {
			return fromClusterError(err)
		}
		if publication {
			// Allowed without operator:write: the answer says no more than that it was done.
			return c.NoContent(http.StatusOK)
		}
		return s.membersResponse(c)
	})
}

// removeMember takes a member out of the cluster (DELETE /v1/cluster/members/{id}).
func (s *Server) removeMember(c echo.Context) error {
	return s.changeMember(c, s.node.RemoveMember)
}

func (s *Server) membersResponse(c echo.Context) error {
	st, err := s.node.Status()
	if err != nil {
		return fromClusterError(err)
	}
	return c.JSON(http.StatusOK, api.MembersResponse{Members: membersBody(st.Members), Warning: s.node.VoterWarning()})
}

func (s *Server) transferLeadership(c echo.Context) error {
	var req api.TransferRequest
	if err := s.decodeBody(c, &req, true); err != nil {
		return err
	}
	return s.atLeader(c, func() error {
		if err := s.callerOperator(c, fsm.AccessWrite); err != nil {
			return err
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		if err := s.node.TransferLeadership(ctx, req.ID); err != nil {
			return fromClusterError(err)
		}
		// The transfer is done once the target won its election, but this node may hear of the
		// new leader a heartbeat later: wait briefly so that the answer names it.
		id, _ := s.node.Leader()
		for deadline := time.Now().Add(2 * time.Second); (id == "" || id == s.node.ID()) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			id, _ = s.node.Leader()
		}
		return c.JSON(http.StatusOK, api.TransferResponse{Leader: id})
	})
}

// firstPublication says whether req only records the HTTP address of a voter that has none
// yet (or repeats the one it has), which needs no token (with TLS, a node certificate instead;
// see mayPublish), and is answered with its status alone: that is how the followers of a
// cluster started with --initial-cluster publish their addresses, before any token exists. It
// adds no member, changes no Raft address and never touches this leader's own record, which it
// publishes itself; followers forward only to the leader's address.
func (s *Server) firstPublication(req api.AddMemberRequest) bool {
	if req.ID == s.node.ID() {
		return false
	}
	st, err := s.node.Status()
	if err != nil {
		return false
	}
	for _, m := range st.Members {
		if m.ID == req.ID {
			return m.Voter && m.RaftAddr == req.RaftAddr && (m.HTTPAddr == "" || m.HTTPAddr == req.HTTPAddr)
		}
	}
	return false
}

// callerOperator refuses unless the caller has at least want on the cluster.
func (s *Server) callerOperator(c echo.Context, want fsm.Access) error {
	id, err := s.caller(c)
	if err != nil {
		return err
	}
	return id.operator(want)
}

func membersBody(ms []cluster.MemberInfo) []api.Member {
	out := make([]api.Member, len(ms))
	for i, m := range ms {
		suffrage := "nonvoter"
		if m.Voter {
			suffrage = "voter"
		}
		out[i] = api.Member{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr, Suffrage: suffrage, Leader: m.Leader}
		if m.Report != nil {
			memberReport(&out[i], m.Report)
		}
	}
	return out
}

func hostPort(s string) bool {
	i := strings.LastIndexByte(s, ':')
	return i > 0 && i < len(s)-1 && !strings.ContainsAny(s, " /")
}
