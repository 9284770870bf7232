package fsm_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// The tests in this file pin the ACL rules of the state machine (SECURITY.md, "Tokens and
// policies"): policy matching, bootstrap, tokens and policies as commands, session owners.

func rule(prefix string, a fsm.Access) fsm.LockRule { return fsm.LockRule{Prefix: prefix, Access: a} }

func TestLongestMatchingPrefixWins(t *testing.T) {
	rules := []fsm.LockRule{rule("", fsm.AccessRead), rule("jobs/", fsm.AccessWrite), rule("jobs/secret/", fsm.AccessDeny), rule("jobs/secret/open", fsm.AccessRead)}
	cases := map[string]fsm.Access{
		"anything":             fsm.AccessRead,  // only "" matches
		"jobs/nightly":         fsm.AccessWrite, // "jobs/" beats ""
		"jobs/secret/x":        fsm.AccessDeny,  // the deny is longer than "jobs/"
		"jobs/secret/open/now": fsm.AccessRead,  // and a longer rule reopens part of it
		"jobs":                 fsm.AccessRead,  // "jobs/" is not a prefix of "jobs": names are bytes
		"JOBS/x":               fsm.AccessRead,  // nor is matching case-insensitive
	}
	for name, want := range cases {
		if got := fsm.LongestPrefix(rules, name); got != want {
			t.Errorf("%q: %v, want %v", name, got, want)
		}
	}
}

func TestNoMatchingRuleDenies(t *testing.T) {
	if got := fsm.LongestPrefix(nil, "a"); got != fsm.AccessDeny {
		t.Fatalf("no rules: %v", got)
	}
	if got := fsm.LongestPrefix([]fsm.LockRule{rule("jobs/", fsm.AccessWrite)}, "db/x"); got != fsm.AccessDeny {
		t.Fatalf("no matching rule: %v", got)
	}
	var zero fsm.Authorizer
	if zero.Lock("a") != fsm.AccessDeny || zero.Operator() != fsm.AccessDeny || zero.Management() {
		t.Fatal("the zero Authorizer allows something")
	}
}

func TestWriteIncludesRead(t *testing.T) {
	a := fsm.NewAuthorizer([]fsm.Policy{{Name: "w", Locks: []fsm.LockRule{rule("", fsm.AccessWrite)}}})
	if got := a.Lock("x"); got < fsm.AccessRead || got < fsm.AccessWrite {
		t.Fatalf("write rule gives %v", got)
	}
}

// Across a token's policies the longest prefix still wins, whichever policy it is in; on the
// same prefix an explicit deny wins, and otherwise the stronger level.
func TestRulesOfSeveralPoliciesCombine(t *testing.T) {
	jobs := fsm.Policy{Name: "jobs", Locks: []fsm.LockRule{rule("jobs/", fsm.AccessWrite)}}
	reader := fsm.Policy{Name: "reader", Locks: []fsm.LockRule{rule("", fsm.AccessRead), rule("jobs/", fsm.AccessRead)}, Operator: fsm.AccessRead}
	noSecret := fsm.Policy{Name: "no-secret", Locks: []fsm.LockRule{rule("jobs/secret/", fsm.AccessDeny)}}
	denyJobs := fsm.Policy{Name: "deny-jobs", Locks: []fsm.LockRule{rule("jobs/", fsm.AccessDeny)}, Operator: fsm.AccessWrite}

	a := fsm.NewAuthorizer([]fsm.Policy{jobs, reader, noSecret})
	for name, want := range map[string]fsm.Access{"jobs/x": fsm.AccessWrite, "db/x": fsm.AccessRead, "jobs/secret/k": fsm.AccessDeny} {
		if got := a.Lock(name); got != want {
			t.Errorf("jobs+reader+no-secret on %q: %v, want %v", name, got, want)
		}
	}
	if a.Operator() != fsm.AccessRead {
		t.Errorf("operator %v, want read", a.Operator())
	}
	b := fsm.NewAuthorizer([]fsm.Policy{jobs, denyJobs, reader})
	if got := b.Lock("jobs/x"); got != fsm.AccessDeny {
		t.Errorf("write and deny on the same prefix: %v, want deny", got)
	}
	if got := b.Lock("db/x"); got != fsm.AccessRead {
		t.Errorf("db/x: %v", got)
	}
	if b.Operator() != fsm.AccessWrite {
		t.Errorf("operator %v, want the strongest, write", b.Operator())
	}
}

func TestManagementAllowsEverything(t *testing.T) {
	a := fsm.NewAuthorizer([]fsm.Policy{{Name: fsm.ManagementPolicy}, {Name: "d", Locks: []fsm.LockRule{rule("", fsm.AccessDeny)}}})
	if !a.Management() || a.Lock("anything") != fsm.AccessWrite || a.Operator() != fsm.AccessWrite {
		t.Fatalf("management: %+v", a)
	}
}

// aclHarness is a harness with the ACLs bootstrapped (token "root"), a policy jobs (write on
// jobs/) and a token "jobs" using it.
func aclHarness(t *testing.T) *harness {
	h := newHarness(t)
	mustStatus(t, h.apply(bootstrap("root")), fsm.StatusOK)
	mustStatus(t, h.apply(setPolicy("jobs", false, rule("jobs/", fsm.AccessWrite))), fsm.StatusOK)
	mustStatus(t, h.apply(createToken("jobs", "jobs")), fsm.StatusOK)
	return h
}

func bootstrap(name string) fsm.Command {
	return fsm.Command{Type: fsm.TypeACLBootstrap, ACLToken: fsm.ACLToken{AccessorID: "acc-" + name, SecretHash: fsm.HashSecret("secret-" + name), Description: name}}
}

func createToken(name string, policies ...string) fsm.Command {
	return fsm.Command{Type: fsm.TypeACLCreateToken, ACLToken: fsm.ACLToken{AccessorID: "acc-" + name,
		SecretHash: fsm.HashSecret("secret-" + name), Description: name, Policies: policies}}
}

func setPolicy(name string, createOnly bool, rules ...fsm.LockRule) fsm.Command {
	return fsm.Command{Type: fsm.TypeACLSetPolicy, CreateOnly: createOnly, Policy: fsm.Policy{Name: name, Locks: rules}}
}

func TestBootstrapWorksOnce(t *testing.T) {
	h := newHarness(t)
	if h.f.ACLBootstrapped() {
		t.Fatal("a new state is bootstrapped")
	}
	mustStatus(t, h.apply(bootstrap("root")), fsm.StatusOK)
	tok, authz, ok := h.f.ResolveSecret(fsm.HashSecret("secret-root"))
	if !ok || tok.AccessorID != "acc-root" || !reflect.DeepEqual(tok.Policies, []string{fsm.ManagementPolicy}) ||
		tok.CreateIndex != h.index || !authz.Management() || !h.f.ACLBootstrapped() {
		t.Fatalf("bootstrap token %+v, %v", tok, ok)
	}
	before := snapshotBytes(t, h.f)
	mustStatus(t, h.apply(bootstrap("again")), fsm.StatusAlreadyBootstrapped)
	if !bytes.Equal(snapshotBytes(t, h.f), before) {
		t.Fatal("a second bootstrap changed the state")
	}
}

func TestBootstrapTokenIsAlwaysManagementOnly(t *testing.T) {
	h := newHarness(t)
	c := bootstrap("root")
	c.ACLToken.Policies = []string{"whatever"} // a bootstrap's policies are not taken from the command
	mustStatus(t, h.apply(c), fsm.StatusOK)
	if tok, _ := h.f.ACLToken("acc-root"); !reflect.DeepEqual(tok.Policies, []string{fsm.ManagementPolicy}) {
		t.Fatalf("bootstrap token policies %v", tok.Policies)
	}
}

func TestTokenNeedsExistingPolicies(t *testing.T) {
	h := aclHarness(t)
	before := snapshotBytes(t, h.f)
	mustStatus(t, h.apply(createToken("x", "nope")), fsm.StatusPolicyNotFound)
	mustStatus(t, h.apply(createToken("x", "jobs", "jobs")), fsm.StatusInvalid)
	mustStatus(t, h.apply(createToken("jobs", "jobs")), fsm.StatusExists) // accessor in use
	dupSecret := createToken("y")
	dupSecret.ACLToken.SecretHash = fsm.HashSecret("secret-jobs")
	mustStatus(t, h.apply(dupSecret), fsm.StatusExists)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeACLCreateToken}), fsm.StatusInvalid) // no accessor
	if !bytes.Equal(snapshotBytes(t, h.f), before) {
		t.Fatal("refused token commands changed the state")
	}
	mustStatus(t, h.apply(createToken("both", fsm.ManagementPolicy, "jobs")), fsm.StatusOK)
	mustStatus(t, h.apply(createToken("none")), fsm.StatusOK) // no policy: sessions only
	if _, authz, ok := h.f.ResolveSecret(fsm.HashSecret("secret-none")); !ok || authz.Lock("jobs/x") != fsm.AccessDeny {
		t.Fatalf("token without policies: %v %+v", ok, authz)
	}
}

func TestResolveSecretSeesPolicyChanges(t *testing.T) {
	h := aclHarness(t)
	hash := fsm.HashSecret("secret-jobs")
	if _, a, _ := h.f.ResolveSecret(hash); a.Lock("jobs/x") != fsm.AccessWrite || a.Lock("db/x") != fsm.AccessDeny {
		t.Fatalf("before: %+v", a)
	}
	mustStatus(t, h.apply(setPolicy("jobs", false, rule("jobs/", fsm.AccessRead), rule("db/", fsm.AccessWrite))), fsm.StatusOK)
	if _, a, _ := h.f.ResolveSecret(hash); a.Lock("jobs/x") != fsm.AccessRead || a.Lock("db/x") != fsm.AccessWrite {
		t.Fatalf("after the policy changed: %+v", a)
	}
	p, _ := h.f.Policy("jobs")
	if p.CreateIndex != 2 || p.ModifyIndex != h.index {
		t.Fatalf("policy indexes %d %d, want 2 and %d", p.CreateIndex, p.ModifyIndex, h.index)
	}
	mustStatus(t, h.apply(setPolicy("jobs", true)), fsm.StatusExists) // create-only
	if _, a, _ := h.f.ResolveSecret(fsm.HashSecret("unknown")); a.Lock("jobs/x") != fsm.AccessDeny {
		t.Fatal("an unknown secret is allowed something")
	}
}

func TestDeletedPolicyLeavesEveryToken(t *testing.T) {
	h := aclHarness(t)
	mustStatus(t, h.apply(setPolicy("ops", false)), fsm.StatusOK)
	mustStatus(t, h.apply(createToken("two", "ops", "jobs")), fsm.StatusOK)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeACLDeletePolicy, Policy: fsm.Policy{Name: "jobs"}}), fsm.StatusOK)
	if _, ok := h.f.Policy("jobs"); ok {
		t.Fatal("deleted policy still stored")
	}
	one, _ := h.f.ACLToken("acc-jobs")
	two, _ := h.f.ACLToken("acc-two")
	if one.Policies != nil || !reflect.DeepEqual(two.Policies, []string{"ops"}) {
		t.Fatalf("tokens after the delete: %v and %v", one.Policies, two.Policies)
	}
	if _, a, _ := h.f.ResolveSecret(fsm.HashSecret("secret-jobs")); a.Lock("jobs/x") != fsm.AccessDeny {
		t.Fatal("a deleted policy still allows")
	}
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeACLDeletePolicy, Policy: fsm.Policy{Name: "jobs"}}), fsm.StatusNotFound)
	// A policy made again under the old name gives the tokens nothing back.
	mustStatus(t, h.apply(setPolicy("jobs", true, rule("", fsm.AccessWrite))), fsm.StatusOK)
	if _, a, _ := h.f.ResolveSecret(fsm.HashSecret("secret-jobs")); a.Lock("jobs/x") != fsm.AccessDeny {
		t.Fatal("a re-created policy reached a token that lost the old one")
	}
}

func TestManagementPolicyCannotBeChangedOrDeleted(t *testing.T) {
	h := aclHarness(t)
	before := snapshotBytes(t, h.f)
	mustStatus(t, h.apply(setPolicy(fsm.ManagementPolicy, false)), fsm.StatusBuiltinPolicy)
	mustStatus(t, h.apply(setPolicy(fsm.ManagementPolicy, true)), fsm.StatusBuiltinPolicy)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeACLDeletePolicy, Policy: fsm.Policy{Name: fsm.ManagementPolicy}}), fsm.StatusBuiltinPolicy)
	mustStatus(t, h.apply(setPolicy("", false)), fsm.StatusInvalid)
	mustStatus(t, h.apply(setPolicy("dup", false, rule("a", fsm.AccessRead), rule("a", fsm.AccessWrite))), fsm.StatusInvalid)
	if !bytes.Equal(snapshotBytes(t, h.f), before) {
		t.Fatal("refused policy commands changed the state")
	}
	if _, ok := h.f.Policy(fsm.ManagementPolicy); ok {
		t.Fatal("the built-in policy is stored")
	}
}

func TestLastManagementTokenCannotBeDeleted(t *testing.T) {
	h := aclHarness(t)
	del := func(name string) fsm.Result {
		return h.apply(fsm.Command{Type: fsm.TypeACLDeleteToken, ACLToken: fsm.ACLToken{AccessorID: "acc-" + name}})
	}
	mustStatus(t, del("root"), fsm.StatusLastManagement)
	mustStatus(t, h.apply(createToken("admin", fsm.ManagementPolicy)), fsm.StatusOK)
	mustStatus(t, del("root"), fsm.StatusOK)
	mustStatus(t, del("root"), fsm.StatusNotFound)
	if _, _, ok := h.f.ResolveSecret(fsm.HashSecret("secret-root")); ok {
		t.Fatal("a deleted token still resolves")
	}
	mustStatus(t, del("jobs"), fsm.StatusOK)
	mustStatus(t, del("admin"), fsm.StatusLastManagement)
	if toks := h.f.ACLTokens(); len(toks) != 1 || toks[0].AccessorID != "acc-admin" {
		t.Fatalf("tokens left %+v", toks)
	}
}

// A session records the token that created it; deleting the token leaves the session alone
// (it expires after its TTL unless a management token renews it).
func TestSessionsRecordTheirOwner(t *testing.T) {
	h := aclHarness(t)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: sid(1), TTL: time.Second, Owner: "acc-jobs"}), fsm.StatusOK)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: sid(2), TTL: time.Second, Owner: "acc-jobs"}), fsm.StatusOK)
	h.create(sid(3)) // no owner: made without ACLs
	if info, _ := h.f.Session(sid(1)); info.Owner != "acc-jobs" {
		t.Fatalf("owner %q", info.Owner)
	}
	if info, _ := h.f.Session(sid(3)); info.Owner != "" {
		t.Fatalf("owner %q", info.Owner)
	}
	if n := h.f.SessionsOwnedBy("acc-jobs"); n != 2 {
		t.Fatalf("owned %d", n)
	}
	h.destroy(sid(1))
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeACLDeleteToken, ACLToken: fsm.ACLToken{AccessorID: "acc-jobs"}}), fsm.StatusOK)
	if info, ok := h.f.Session(sid(2)); !ok || info.Owner != "acc-jobs" {
		t.Fatalf("session of a deleted token: %+v %v", info, ok)
	}
	if n := h.f.SessionsOwnedBy("acc-jobs"); n != 1 {
		t.Fatalf("owned after a destroy %d", n)
	}
	h.expire(sid(2), now0)
	if n := h.f.SessionsOwnedBy("acc-jobs"); n != 0 {
		t.Fatalf("owned after the expiry %d", n)
	}
}

// A create-session entry written before owners existed (no trailing field) still decodes, as
// a session without owner.
func TestCreateSessionWithoutOwnerFieldDecodes(t *testing.T) {
	old := []byte{1, byte(fsm.TypeCreateSession)}
	id := sid(7)
	old = append(old, id[:]...)
	old = append(old, 1, 's', 0x80, 0x94, 0xeb, 0xdc, 0x03, 0) // name "s", TTL 1s, no lock-delay
	c, err := fsm.DecodeCommand(old)
	if err != nil || c.Owner != "" || c.TTL != time.Second || c.Session != id {
		t.Fatalf("decoded %+v, %v", c, err)
	}
	if again := c.Encode(nil); !bytes.Equal(again, old) {
		t.Fatalf("re-encoded as % x", again)
	}
}

// The state keeps only hashes: the plain secret is in no command and no snapshot.
func TestSecretsAreStoredAsHashesOnly(t *testing.T) {
	h := aclHarness(t)
	snap := snapshotBytes(t, h.f)
	hash := fsm.HashSecret("secret-jobs")
	if bytes.Contains(snap, []byte("secret-jobs")) || !bytes.Contains(snap, hash[:]) {
		t.Fatal("the snapshot holds a plain secret, or not the hash")
	}
	c := createToken("jobs", "jobs")
	if enc := c.Encode(nil); bytes.Contains(enc, []byte("secret-jobs")) {
		t.Fatal("the command holds the plain secret")
	}
}

func TestACLStateSurvivesSnapshotAndRestore(t *testing.T) {
	h := aclHarness(t)
	mustStatus(t, h.apply(fsm.Command{Type: fsm.TypeCreateSession, Session: sid(1), TTL: time.Second, Owner: "acc-jobs"}), fsm.StatusOK)
	r := fsm.New(nil)
	if err := r.Restore(readCloser(snapshotBytes(t, h.f))); err != nil {
		t.Fatal(err)
	}
	if !r.ACLBootstrapped() || !reflect.DeepEqual(r.ACLTokens(), h.f.ACLTokens()) || !reflect.DeepEqual(r.Policies(), h.f.Policies()) {
		t.Fatal("ACL state differs after restore")
	}
	if _, a, ok := r.ResolveSecret(fsm.HashSecret("secret-jobs")); !ok || a.Lock("jobs/x") != fsm.AccessWrite {
		t.Fatal("restored token does not resolve")
	}
	if r.SessionsOwnedBy("acc-jobs") != 1 {
		t.Fatal("owner counts not rebuilt on restore")
	}
	mustStatus(t, r.ApplyCommand(h.index+1, bootstrap("again")), fsm.StatusAlreadyBootstrapped)
}
