package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// The /v1/acl endpoints (docs/acl.md): bootstrap needs no token, token/self any token, the
// rest the management policy. Secrets leave the server only in the answers of bootstrap and
// token creation.

func (s *Server) aclRoutes(g *echo.Group) {
	g.POST("/bootstrap", s.aclBootstrap)
	g.GET("/policies", s.listPolicies)
	g.POST("/policies", s.createPolicy)
	g.GET("/policies/:name", s.getPolicy)
	g.PUT("/policies/:name", s.putPolicy)
	g.DELETE("/policies/:name", s.deletePolicy)
	g.GET("/tokens", s.listTokens)
	g.POST("/tokens", s.createToken)
	g.GET("/tokens/:accessor", s.getToken)
	g.DELETE("/tokens/:accessor", s.deleteToken)
	g.GET("/token/self", s.tokenSelf)
}

// Bounds of ACL fields.
const (
	maxPolicyName     = 128
	maxPolicyRules    = 256
	maxTokenPolicies  = 64
	maxTokenDescBytes = 256
)

func (s *Server) aclBootstrap(c echo.Context) error {
	var empty struct{}
	if err := s.decodeBody(c, &empty, true); err != nil {
		return err
	}
	return s.atLeader(c, func() error {
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		t, err := s.node.ACLBootstrap(ctx)
		if err != nil {
			return fromClusterError(err)
		}
		return c.JSON(http.StatusOK, api.BootstrapResponse{AccessorID: t.AccessorID, SecretID: t.SecretID, Policies: t.Policies})
	})
}

// asManagement runs fn on the leader if the caller has the management policy.
func (s *Server) asManagement(c echo.Context, fn func() error) error {
	return s.atLeader(c, func() error {
		if err := s.callerManagement(c); err != nil {
			return err
		}
		return fn()
	})
}

// readAsManagement runs fn as a read (linearizable unless stale) if the caller has the
// management policy.
func (s *Server) readAsManagement(c echo.Context, fn func() error) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	return s.read(c, q, func() error {
		if err := s.callerManagement(c); err != nil {
			return err
		}
		return fn()
	})
}

func (s *Server) callerManagement(c echo.Context) error {
	id, err := s.caller(c)
	if err != nil {
		return err
	}
	return id.management()
}

func (s *Server) listPolicies(c echo.Context) error {
	return s.readAsManagement(c, func() error {
		out := api.PolicyList{Policies: []api.Policy{managementBody()}}
		for _, p := range s.node.FSM().Policies() {
			out.Policies = append(out.Policies, policyBody(p))
		}
		slices.SortFunc(out.Policies, func(a, b api.Policy) int { return strings.Compare(a.Name, b.Name) })
		return c.JSON(http.StatusOK, out)
	})
}

func (s *Server) getPolicy(c echo.Context) error {
	name := c.Param("name")
	return s.readAsManagement(c, func() error {
		if name == fsm.ManagementPolicy {
			return c.JSON(http.StatusOK, managementBody())
		}
		p, ok := s.node.FSM().Policy(name)
		if !ok {
			return newError(http.StatusNotFound, api.CodeNotFound, "policy %q does not exist", name)
		}
		return c.JSON(http.StatusOK, policyBody(p))
	})
}

func (s *Server) createPolicy(c echo.Context) error {
	p, err := s.policyRequest(c, "")
	if err != nil {
		return err
	}
	return s.storePolicy(c, p, true)
}

func (s *Server) putPolicy(c echo.Context) error {
	p, err := s.policyRequest(c, c.Param("name"))
	if err != nil {
		return err
	}
	return s.storePolicy(c, p, false)
}

func (s *Server) storePolicy(c echo.Context, p fsm.Policy, createOnly bool) error {
	if p.Name == fsm.ManagementPolicy {
		return fromClusterError(cluster.ErrBuiltinPolicy)
	}
	return s.asManagement(c, func() error {
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		stored, err := s.node.SetACLPolicy(ctx, p, createOnly)
		if err != nil {
			return fromClusterError(err)
		}
		return c.JSON(http.StatusOK, policyBody(stored))
	})
}

func (s *Server) deletePolicy(c echo.Context) error {
	name := c.Param("name")
	if name == fsm.ManagementPolicy {
		return fromClusterError(cluster.ErrBuiltinPolicy)
	}
	return s.asManagement(c, func() error {
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		if err := s.node.DeleteACLPolicy(ctx, name); err != nil {
			return fromClusterError(err)
		}
		return c.JSON(http.StatusOK, api.DeleteResponse{Deleted: true})
	})
}

func (s *Server) listTokens(c echo.Context) error {
	return s.readAsManagement(c, func() error {
		toks := s.node.FSM().ACLTokens()
		out := api.TokenList{Tokens: make([]api.Token, len(toks))}
		for i, t := range toks {
			out.Tokens[i] = tokenBody(t)
		}
		return c.JSON(http.StatusOK, out)
	})
}

func (s *Server) getToken(c echo.Context) error {
	accessor := c.Param("accessor")
	return s.readAsManagement(c, func() error {
		t, ok := s.node.FSM().ACLToken(accessor)
		if !ok {
			return newError(http.StatusNotFound, api.CodeNotFound, "token %q does not exist", accessor)
		}
		return c.JSON(http.StatusOK, tokenBody(t))
	})
}

// tokenSelf shows the caller's own token, which any token may read.
func (s *Server) tokenSelf(c echo.Context) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	return s.read(c, q, func() error {
		id, err := s.caller(c)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, tokenBody(id.token))
	})
}

func (s *Server) createToken(c echo.Context) error {
	var req api.CreateTokenRequest
	if err := s.decodeBody(c, &req, false); err != nil {
		return err
	}
	if len(req.Description) > maxTokenDescBytes || !utf8.ValidString(req.Description) {
		return invalid("description must be valid UTF-8 of at most %d bytes", maxTokenDescBytes)
	}
	if len(req.Policies) > maxTokenPolicies {
		return invalid("a token has at most %d policies", maxTokenPolicies)
	}
	for i, name := range req.Policies {
		if err := policyName(name); err != nil {
			return err
		}
		for _, other := range req.Policies[:i] {
			if other == name {
				return invalid("policy %q is named twice", name)
			}
		}
	}
	return s.asManagement(c, func() error {
		for _, name := range req.Policies {
			if _, ok := s.node.FSM().Policy(name); !ok && name != fsm.ManagementPolicy {
				return invalid("policy %q does not exist", name)
			}
		}
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		t, err := s.node.CreateACLToken(ctx, req.Description, req.Policies)
		if err != nil {
			if fromClusterError(err).status == http.StatusNotFound {
				// Deleted between the check above and the command.
				return invalid("a policy of the token does not exist")
			}
			return fromClusterError(err)
		}
		b := tokenBody(t.ACLToken)
		return c.JSON(http.StatusOK, api.NewToken{AccessorID: b.AccessorID, SecretID: t.SecretID,
			Description: b.Description, Policies: b.Policies, CreateIndex: b.CreateIndex})
	})
}

func (s *Server) deleteToken(c echo.Context) error {
	accessor := c.Param("accessor")
	return s.asManagement(c, func() error {
		ctx, cancel := s.commandContext(c, 0)
		defer cancel()
		if err := s.node.DeleteACLToken(ctx, accessor); err != nil {
			return fromClusterError(err)
		}
		return c.JSON(http.StatusOK, api.DeleteResponse{Deleted: true})
	})
}

// policyRequest reads and checks a policy body. pathName is the name in the path (PUT), which
// the body may repeat but not contradict; "" for POST, whose body names the policy.
func (s *Server) policyRequest(c echo.Context, pathName string) (fsm.Policy, error) {
	var req api.Policy
	if err := s.decodeBody(c, &req, false); err != nil {
		return fsm.Policy{}, err
	}
	switch {
	case pathName != "" && req.Name == "":
		req.Name = pathName
	case pathName != "" && req.Name != pathName:
		return fsm.Policy{}, invalid("the body names policy %q, the path %q", req.Name, pathName)
	}
	if err := policyName(req.Name); err != nil {
		return fsm.Policy{}, err
	}
	p := fsm.Policy{Name: req.Name}
	switch req.Operator {
	case "", api.AccessNone:
		p.Operator = fsm.AccessDeny
	case api.AccessRead:
		p.Operator = fsm.AccessRead
	case api.AccessWrite:
		p.Operator = fsm.AccessWrite
	default:
		return fsm.Policy{}, invalid("operator %q is not none, read or write", req.Operator)
	}
	if len(req.Locks) > maxPolicyRules {
		return fsm.Policy{}, invalid("a policy has at most %d lock rules", maxPolicyRules)
	}
	seen := make(map[string]bool, len(req.Locks))
	for _, r := range req.Locks {
		a, err := lockAccess(r.Access)
		if err != nil {
			return fsm.Policy{}, err
		}
		if err := s.cfg.Limits.prefix(r.Prefix); err != nil {
			return fsm.Policy{}, err
		}
		if seen[r.Prefix] {
			return fsm.Policy{}, invalid("prefix %q has two rules", r.Prefix)
		}
		seen[r.Prefix] = true
		p.Locks = append(p.Locks, fsm.LockRule{Prefix: r.Prefix, Access: a})
	}
	return p, nil
}

func lockAccess(s string) (fsm.Access, error) {
	switch s {
	case api.AccessDeny:
		return fsm.AccessDeny, nil
	case api.AccessRead:
		return fsm.AccessRead, nil
	case api.AccessWrite:
		return fsm.AccessWrite, nil
	}
	return 0, invalid("access %q is not deny, read or write", s)
}

// policyName checks a policy name: 1–128 letters, digits, '-' and '_'.
func policyName(n string) error {
	if n == "" || len(n) > maxPolicyName {
		return invalid("a policy name is 1 to %d characters", maxPolicyName)
	}
	for i := 0; i < len(n); i++ {
		b := n[i]
		if !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_') {
			return invalid("policy name %q may hold only letters, digits, '-' and '_'", n)
		}
	}
	return nil
}

// prefix checks a lock rule's prefix: any start of a valid lock name, "" included.
func (l *Limits) prefix(p string) error {
	if len(p) > l.MaxNameBytes {
		return invalid("prefix is %d bytes; lock names have at most %d", len(p), l.MaxNameBytes)
	}
	for i := 0; i < len(p); i++ {
		if !nameByte(p[i]) {
			return invalid("prefix %q has a character outside [A-Za-z0-9._:/-] at byte %d", p, i)
		}
	}
	return nil
}

var accessNames = map[fsm.Access]string{fsm.AccessDeny: api.AccessDeny, fsm.AccessRead: api.AccessRead, fsm.AccessWrite: api.AccessWrite}

func policyBody(p fsm.Policy) api.Policy {
	out := api.Policy{Name: p.Name, Locks: make([]api.LockRule, len(p.Locks)), Operator: api.AccessNone,
		CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex}
	if p.Operator != fsm.AccessDeny {
		out.Operator = accessNames[p.Operator]
	}
	for i, r := range p.Locks {
		out.Locks[i] = api.LockRule{Prefix: r.Prefix, Access: accessNames[r.Access]}
	}
	return out
}

// managementBody describes the built-in policy as the rules it amounts to.
func managementBody() api.Policy {
	return api.Policy{Name: fsm.ManagementPolicy, Locks: []api.LockRule{{Prefix: "", Access: api.AccessWrite}}, Operator: api.AccessWrite}
}

func tokenBody(t fsm.ACLToken) api.Token {
	policies := t.Policies
	if policies == nil {
		policies = []string{}
	}
	return api.Token{AccessorID: t.AccessorID, Description: t.Description, Policies: policies, CreateIndex: t.CreateIndex}
}
