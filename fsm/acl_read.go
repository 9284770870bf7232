package fsm

import (
	"cmp"
	"slices"
)

// ACLBootstrapped reports whether the cluster's first management token was created.
func (f *FSM) ACLBootstrapped() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.acl.bootstrapped
}

// ResolveSecret returns the token whose secret hashes to hash, with what its policies allow
// now, and whether there is one.
func (f *FSM) ResolveSecret(hash [32]byte) (ACLToken, Authorizer, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t := f.st.acl.bySecret[hash]
	if t == nil {
		return ACLToken{}, Authorizer{}, false
	}
	return t.clone(), f.st.acl.authorizer(t), true
}

// ACLToken returns the token with the accessor id, and whether there is one.
func (f *FSM) ACLToken(accessor string) (ACLToken, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t := f.st.acl.tokens[accessor]
	if t == nil {
		return ACLToken{}, false
	}
	return t.clone(), true
}

// ACLTokens returns every token, oldest first.
func (f *FSM) ACLTokens() []ACLToken {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]ACLToken, 0, len(f.st.acl.tokens))
	for _, t := range f.st.acl.tokens {
		out = append(out, t.clone())
	}
	slices.SortFunc(out, func(a, b ACLToken) int {
		return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), cmp.Compare(a.AccessorID, b.AccessorID))
	})
	return out
}

// Policy returns the stored policy with the name, and whether there is one; the built-in
// management policy is not stored.
func (f *FSM) Policy(name string) (Policy, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	p := f.st.acl.policies[name]
	if p == nil {
		return Policy{}, false
	}
	return p.clone(), true
}

// Policies returns the stored policies, sorted by name.
func (f *FSM) Policies() []Policy {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]Policy, 0, len(f.st.acl.policies))
	for _, p := range f.st.acl.policies {
		out = append(out, p.clone())
	}
	slices.SortFunc(out, func(a, b Policy) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// SessionsOwnedBy counts the sessions whose owner is the accessor id.
func (f *FSM) SessionsOwnedBy(accessor string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.owned[accessor]
}
