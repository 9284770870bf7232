package httpapi

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// promoteMember makes a non-voter a voter once it has caught up with the log (POST
// /v1/cluster/members/{id}/promote): 409 not_caught_up until then.
func (s *Server) promoteMember(c echo.Context) error {
	return s.changeMember(c, s.node.PromoteMember)
}

// changeMember applies change to the member named in the path, at the leader and for an
// operator, and answers with the members as they are after it.
func (s *Server) changeMember(c echo.Context, change func(ctx context.Context, id string) error) error {
	id := c.Param("id")
	return s.atLeader(c, func() error {
		if err := s.callerOperator(c, fsm.AccessWrite); err != nil {
			return err
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		if err := change(ctx, id); err != nil {
			return membershipError(err)
		}
		return s.membersResponse(c)
	})
}

// membershipError is fromClusterError with the errors of membership changes.
func membershipError(err error) error {
	if errors.Is(err, cluster.ErrNotCaughtUp) {
		e := newError(http.StatusConflict, api.CodeNotCaughtUp, "%v; ask again later", err)
		e.retryAfter = "1"
		return e
	}
	return fromClusterError(err)
}

// suffrageVoter parses the suffrage of an add-member request: voter unless "nonvoter".
func suffrageVoter(s string) (bool, error) {
	switch s {
	case "", api.SuffrageVoter:
		return true, nil
	case api.SuffrageNonvoter:
		return false, nil
	}
	return false, invalid("suffrage %q is not %q or %q", s, api.SuffrageVoter, api.SuffrageNonvoter)
}

// memberReport fills in what the leader's last report of a member says.
func memberReport(m *api.Member, r *cluster.MemberReport) {
	m.Version, m.Features = r.Version, featureNames(r.Features)
	applied, lag := r.AppliedIndex, r.Lag()
	m.AppliedIndex, m.Lag = &applied, &lag
}

// removedError answers /v1/health and /v1/ready on a node removed from its cluster.
func removedError() error {
	return newError(http.StatusServiceUnavailable, api.CodeRemoved,
		"this node was removed from the cluster: it gets no more of the log; start it with --join to add it again (its data dir may stay as it is)")
}
