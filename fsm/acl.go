package fsm

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"strings"
)

// Access is a level of access that a policy grants: to locks deny, read or write; to the
// cluster (operator) none, read or write. Each level includes the ones below it.
type Access uint8

// Access levels, weakest first.
const (
	AccessDeny  Access = iota // no access: "deny" in a lock rule, "none" for operator
	AccessRead                // read the lock (or the cluster)
	AccessWrite               // acquire, release, cancel-wait (or change the cluster); includes read
)

var accessNames = [...]string{"deny", "read", "write"}

// String names the level as a lock rule spells it.
func (a Access) String() string {
	if int(a) < len(accessNames) {
		return accessNames[a]
	}
	return fmt.Sprintf("access(%d)", a)
}

// ManagementPolicy names the built-in policy that allows everything; it is not stored and
// cannot be changed or deleted.
const ManagementPolicy = "management"

// LockRule grants Access to every lock whose name starts with Prefix; "" matches every name.
type LockRule struct {
	Prefix string
	Access Access
}

// Policy is a named set of lock rules and an operator level.
type Policy struct {
	Name     string
	Locks    []LockRule
	Operator Access
	// CreateIndex and ModifyIndex are the log indexes of the policy's creation and last
	// change; a command's are ignored.
	CreateIndex, ModifyIndex uint64
}

// ACLToken is a token as the state keeps it: its secret only as a SHA-256 hash, so that the
// plain secret reaches no log entry and no snapshot.
type ACLToken struct {
	AccessorID  string
	SecretHash  [32]byte
	Description string
	// Policies are the names of the token's policies, in the order given; a deleted policy
	// is taken out of every token.
	Policies []string
	// CreateIndex is the log index of the token's creation; a command's is ignored.
	CreateIndex uint64
}

// HashSecret returns the hash under which a token's secret is stored and looked up.
func HashSecret(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// Management reports whether the token has the built-in management policy.
func (t *ACLToken) Management() bool { return slices.Contains(t.Policies, ManagementPolicy) }

func (t ACLToken) clone() ACLToken {
	t.Policies = slices.Clone(t.Policies)
	return t
}

func (p Policy) clone() Policy {
	p.Locks = slices.Clone(p.Locks)
	return p
}

// Authorizer answers what a token's policies allow, together:
//
//   - Lock access: of all the lock rules of all the policies, the rule with the longest
//     prefix that the name starts with wins; "" matches every name; no matching rule denies.
//     When several policies have a rule for that same longest prefix, an explicit deny wins
//     (as in Consul), and otherwise the strongest level.
//   - Operator access: the strongest level of any policy.
//   - The management policy allows everything.
//
// The zero Authorizer allows nothing.
type Authorizer struct {
	management bool
	rules      []LockRule
	operator   Access
}

// NewAuthorizer combines policies. A policy named ManagementPolicy allows everything,
// whatever its rules.
func NewAuthorizer(policies []Policy) Authorizer {
	var a Authorizer
	for _, p := range policies {
		if p.Name == ManagementPolicy {
			a.management = true
		}
		a.rules = append(a.rules, p.Locks...)
		a.operator = max(a.operator, p.Operator)
	}
	return a
}

// Management reports whether the management policy is among the policies.
func (a Authorizer) Management() bool { return a.management }

// Operator returns the access to the cluster (members, leadership, status).
func (a Authorizer) Operator() Access {
	if a.management {
		return AccessWrite
	}
	return a.operator
}

// Lock returns the access to the named lock: see Authorizer.
func (a Authorizer) Lock(name string) Access {
	if a.management {
		return AccessWrite
	}
	return LongestPrefix(a.rules, name)
}

// LongestPrefix returns the access that rules grant to name: the rule with the longest prefix
// of name wins, an explicit deny winning a tie and otherwise the strongest level; no matching
// rule is AccessDeny.
func LongestPrefix(rules []LockRule, name string) Access {
	best, access, denied := -1, AccessDeny, false
	for _, r := range rules {
		if !strings.HasPrefix(name, r.Prefix) || len(r.Prefix) < best {
			continue
		}
		if len(r.Prefix) > best {
			best, access, denied = len(r.Prefix), AccessDeny, false
		}
		if r.Access == AccessDeny {
			denied = true
		}
		access = max(access, r.Access)
	}
	if denied {
		return AccessDeny
	}
	return access
}

// validPolicy checks what apply and restore require of a stored policy: a name that is not
// the built-in one, known levels, and each prefix once.
func validPolicy(p *Policy) bool {
	if p.Name == "" || p.Name == ManagementPolicy || p.Operator > AccessWrite {
		return false
	}
	for i, r := range p.Locks {
		if r.Access > AccessWrite {
			return false
		}
		for _, o := range p.Locks[:i] {
			if o.Prefix == r.Prefix {
				return false
			}
		}
	}
	return true
}

// aclState is the replicated ACL state: whether the cluster was bootstrapped, the policies
// and the tokens. Stored entries are never changed, only replaced, so that a snapshot may
// share them.
type aclState struct {
	bootstrapped bool
	policies     map[string]*Policy
	tokens       map[string]*ACLToken   // by accessor id
	bySecret     map[[32]byte]*ACLToken // the same tokens, by secret hash
}

func newACLState() aclState {
	return aclState{
		policies: make(map[string]*Policy),
		tokens:   make(map[string]*ACLToken),
		bySecret: make(map[[32]byte]*ACLToken),
	}
}

func (s *aclState) putToken(t *ACLToken) {
	s.tokens[t.AccessorID] = t
	s.bySecret[t.SecretHash] = t
}

func (s *aclState) removeToken(t *ACLToken) {
	delete(s.tokens, t.AccessorID)
	delete(s.bySecret, t.SecretHash)
}

// tokenPolicies checks a new token's policy names: each once, and each the management policy
// or a stored one.
func (s *aclState) tokenPolicies(names []string) Status {
	for i, n := range names {
		if slices.Contains(names[:i], n) {
			return StatusInvalid
		}
		if _, ok := s.policies[n]; !ok && n != ManagementPolicy {
			return StatusPolicyNotFound
		}
	}
	return StatusOK
}

// authorizer combines the stored policies that t names.
func (s *aclState) authorizer(t *ACLToken) Authorizer {
	ps := make([]Policy, 0, len(t.Policies))
	for _, n := range t.Policies {
		if n == ManagementPolicy {
			ps = append(ps, Policy{Name: ManagementPolicy})
		} else if p := s.policies[n]; p != nil {
			ps = append(ps, *p)
		}
	}
	return NewAuthorizer(ps)
}

// managementTokens counts the tokens that have the management policy.
func (s *aclState) managementTokens() int {
	n := 0
	for _, t := range s.tokens {
		if t.Management() {
			n++
		}
	}
	return n
}

func (a *applier) aclBootstrap(c *Command) Result {
	acl := &a.st.acl
	if acl.bootstrapped {
		return Result{Status: StatusAlreadyBootstrapped}
	}
	t := c.ACLToken.clone()
	t.Policies = []string{ManagementPolicy}
	if r := a.newToken(&t); r.Status != StatusOK {
		return r
	}
	acl.bootstrapped = true
	return Result{}
}

func (a *applier) aclCreateToken(c *Command) Result {
	t := c.ACLToken.clone()
	if st := a.st.acl.tokenPolicies(t.Policies); st != StatusOK {
		return Result{Status: st}
	}
	return a.newToken(&t)
}

// newToken stores t, created at this index, unless its accessor id or secret is in use.
func (a *applier) newToken(t *ACLToken) Result {
	acl := &a.st.acl
	if t.AccessorID == "" {
		return Result{Status: StatusInvalid}
	}
	if _, ok := acl.tokens[t.AccessorID]; ok {
		return Result{Status: StatusExists}
	}
	if _, ok := acl.bySecret[t.SecretHash]; ok {
		return Result{Status: StatusExists}
	}
	if len(t.Policies) == 0 {
		t.Policies = nil
	}
	t.CreateIndex = a.index
	acl.putToken(t)
	return Result{}
}

func (a *applier) aclDeleteToken(c *Command) Result {
	acl := &a.st.acl
	t := acl.tokens[c.ACLToken.AccessorID]
	if t == nil {
		return Result{Status: StatusNotFound}
	}
	if t.Management() && acl.managementTokens() == 1 {
		// Nobody could manage the ACLs again: there is no second bootstrap.
		return Result{Status: StatusLastManagement}
	}
	acl.removeToken(t)
	if a.st.features.has(FeatureTokenDeleteDropsWaits) {
		a.dropWaitsOf(t.AccessorID)
	}
	return Result{}
}

// dropWaitsOf takes every session that the token owner owns out of every queue, so that no
// wait admitted under a deleted token is granted later. Its holds stay: the sessions expire
// unless a management token renews them.
func (a *applier) dropWaitsOf(owner string) {
	if a.st.owned[owner] == 0 {
		return
	}
	for _, id := range a.st.sortedSessionIDs() {
		ss := a.st.sessions[id]
		if ss.owner != owner {
			continue
		}
		for _, name := range sortedKeys(ss.waits) {
			l := a.st.own(a.st.locks[name])
			l.waiters = a.removeWaiter(l.waiters, id)
			delete(ss.waits, name)
			a.emit(Event{Kind: EventWaitDropped, Lock: name, Session: id})
			a.grantNext(name, l) // a waiting writer may have held readers back
			a.changed(name, l)
		}
	}
}

func (a *applier) aclSetPolicy(c *Command) Result {
	acl := &a.st.acl
	p := c.Policy.clone()
	if p.Name == ManagementPolicy {
		return Result{Status: StatusBuiltinPolicy}
	}
	if !validPolicy(&p) {
		return Result{Status: StatusInvalid}
	}
	old := acl.policies[p.Name]
	if old != nil && c.CreateOnly {
		return Result{Status: StatusExists}
	}
	p.CreateIndex, p.ModifyIndex = a.index, a.index
	if old != nil {
		p.CreateIndex = old.CreateIndex
	}
	if len(p.Locks) == 0 {
		p.Locks = nil
	}
	acl.policies[p.Name] = &p
	return Result{}
}

func (a *applier) aclDeletePolicy(c *Command) Result {
	acl := &a.st.acl
	name := c.Policy.Name
	if name == ManagementPolicy {
		return Result{Status: StatusBuiltinPolicy}
	}
	if acl.policies[name] == nil {
		return Result{Status: StatusNotFound}
	}
	delete(acl.policies, name)
	// Taken out of every token that names it (as Consul does): each token is changed on its
	// own, so the order in which the map yields them does not matter.
	for _, t := range acl.tokens {
		if i := slices.Index(t.Policies, name); i >= 0 {
			nt := t.clone()
			nt.Policies = slices.Delete(nt.Policies, i, i+1)
			if len(nt.Policies) == 0 {
				nt.Policies = nil
			}
			acl.putToken(&nt)
		}
	}
	return Result{}
}
