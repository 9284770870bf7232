package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
)

// The /v1/acl endpoints, field by field: policies and tokens are managed with the management
// policy only, and no answer but the creating one holds a secret.

func TestACLPoliciesCRUD(t *testing.T) {
	eps := aclCluster(t)
	name := uniqueName(t)
	body := api.Policy{Name: name, Locks: []api.LockRule{rule("jobs/", api.AccessWrite), rule("", api.AccessRead)}, Operator: api.AccessRead}
	r := doAs(t, aclRoot, http.MethodPost, eps[1]+"/v1/acl/policies", body)
	var p api.Policy
	ok(t, r, http.StatusOK, &p)
	hasKeys(t, fields(t, r.body), "name", "locks", "operator", "create_index", "modify_index")
	if p.Name != name || len(p.Locks) != 2 || p.Locks[0] != body.Locks[0] || p.Operator != api.AccessRead || p.CreateIndex == 0 || p.ModifyIndex != p.CreateIndex {
		t.Fatalf("created %+v", p)
	}
	apiError(t, doAs(t, aclRoot, http.MethodPost, eps[2]+"/v1/acl/policies", body), http.StatusConflict, api.CodeAlreadyExists)

	var got api.Policy
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[2]+"/v1/acl/policies/"+name, nil), http.StatusOK, &got)
	if got.Name != name || got.CreateIndex != p.CreateIndex {
		t.Fatalf("GET %+v", got)
	}
	// PUT replaces; the name may be left out of the body, or repeated, but not contradicted.
	var put api.Policy
	ok(t, doAs(t, aclRoot, http.MethodPut, eps[0]+"/v1/acl/policies/"+name, api.Policy{Locks: []api.LockRule{rule("x/", api.AccessDeny)}}), http.StatusOK, &put)
	if put.Operator != api.AccessNone || len(put.Locks) != 1 || put.CreateIndex != p.CreateIndex || put.ModifyIndex <= p.ModifyIndex {
		t.Fatalf("PUT %+v", put)
	}
	ok(t, doAs(t, aclRoot, http.MethodPut, eps[0]+"/v1/acl/policies/"+name, got), http.StatusOK, nil) // a GET's body goes back as is
	apiError(t, doAs(t, aclRoot, http.MethodPut, eps[0]+"/v1/acl/policies/"+name, api.Policy{Name: "other"}), http.StatusBadRequest, api.CodeInvalidArgument)

	var list api.PolicyList
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[1]+"/v1/acl/policies", nil), http.StatusOK, &list)
	seen := map[string]bool{}
	for i, x := range list.Policies {
		seen[x.Name] = true
		if i > 0 && list.Policies[i-1].Name >= x.Name {
			t.Fatalf("policies not sorted by name: %v", list.Policies)
		}
	}
	if !seen[name] || !seen[api.ManagementPolicy] {
		t.Fatalf("list misses the new policy or management: %+v", list)
	}
	var mgmt api.Policy
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[1]+"/v1/acl/policies/management", nil), http.StatusOK, &mgmt)
	if mgmt.Operator != api.AccessWrite || len(mgmt.Locks) != 1 || mgmt.Locks[0] != rule("", api.AccessWrite) {
		t.Fatalf("management reads as %+v", mgmt)
	}
	// The built-in policy cannot be made, changed or deleted.
	for _, req := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/v1/acl/policies", api.Policy{Name: api.ManagementPolicy}},
		{http.MethodPut, "/v1/acl/policies/management", api.Policy{}},
		{http.MethodDelete, "/v1/acl/policies/management", nil},
	} {
		r := doAs(t, aclRoot, req.method, eps[1]+req.path, req.body)
		if eb := apiError(t, r, http.StatusForbidden, api.CodeForbidden); !strings.Contains(eb.Error.Message, "built-in") {
			t.Fatalf("%s %s: %q", req.method, req.path, eb.Error.Message)
		}
	}
	var del api.DeleteResponse
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[2]+"/v1/acl/policies/"+name, nil), http.StatusOK, &del)
	if !del.Deleted {
		t.Fatalf("delete: %+v", del)
	}
	apiError(t, doAs(t, aclRoot, http.MethodGet, eps[0]+"/v1/acl/policies/"+name, nil), http.StatusNotFound, api.CodeNotFound)
	apiError(t, doAs(t, aclRoot, http.MethodDelete, eps[0]+"/v1/acl/policies/"+name, nil), http.StatusNotFound, api.CodeNotFound)
}

func TestACLPolicyBodiesAreChecked(t *testing.T) {
	eps := aclCluster(t)
	for _, body := range []string{
		`{"name":"","locks":[]}`,
		`{"name":"has space"}`,
		`{"name":"` + strings.Repeat("x", 129) + `"}`,
		`{"name":"p1","locks":[{"prefix":"a","access":"admin"}]}`,
		`{"name":"p1","locks":[{"prefix":"a","access":"READ"}]}`,
		`{"name":"p1","locks":[{"prefix":"a","access":"read"},{"prefix":"a","access":"write"}]}`,
		`{"name":"p1","locks":[{"prefix":"a b","access":"read"}]}`,
		`{"name":"p1","operator":"deny"}`,
		`{"name":"p1","operator":"root"}`,
		`{"name":"p1","rules":"x"}`,
		`{"name":"p1","locks":{"prefix":"a"}}`,
		`[]`, `{"name":"p1"} {}`,
	} {
		r := rawDo(http.MethodPost, eps[1]+"/v1/acl/policies", body, as(aclRoot))
		apiError(t, r, http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestACLTokensCRUD(t *testing.T) {
	eps := aclCluster(t)
	pol := newPolicy(t, eps[0], api.AccessNone, rule("t/", api.AccessRead))
	r := doAs(t, aclRoot, http.MethodPost, eps[1]+"/v1/acl/tokens", api.CreateTokenRequest{Description: "worker 7", Policies: []string{pol}})
	var tok api.NewToken
	ok(t, r, http.StatusOK, &tok)
	hasKeys(t, fields(t, r.body), "accessor_id", "secret_id", "description", "policies", "create_index")
	if tok.Description != "worker 7" || strings.Join(tok.Policies, ",") != pol || tok.CreateIndex == 0 {
		t.Fatalf("created %+v", tok)
	}
	for _, ep := range eps {
		for _, path := range []string{"/v1/acl/tokens/" + tok.AccessorID, "/v1/acl/tokens"} {
			r := doAs(t, aclRoot, http.MethodGet, ep+path, nil)
			ok(t, r, http.StatusOK, nil)
			if strings.Contains(string(r.body), tok.SecretID) || strings.Contains(string(r.body), aclRoot) || strings.Contains(string(r.body), "secret") {
				t.Fatalf("GET %s shows a secret: %s", path, r.body)
			}
		}
	}
	r = doAs(t, aclRoot, http.MethodGet, eps[2]+"/v1/acl/tokens/"+tok.AccessorID, nil)
	hasKeys(t, fields(t, r.body), "accessor_id", "description", "policies", "create_index")
	var self api.Token
	r = doAs(t, tok.SecretID, http.MethodGet, eps[2]+"/v1/acl/token/self", nil)
	ok(t, r, http.StatusOK, &self)
	hasKeys(t, fields(t, r.body), "accessor_id", "description", "policies", "create_index")
	if self.AccessorID != tok.AccessorID || strings.Contains(string(r.body), tok.SecretID) {
		t.Fatalf("self %s", r.body)
	}
	var list api.TokenList
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[0]+"/v1/acl/tokens", nil), http.StatusOK, &list)
	found := false
	for _, x := range list.Tokens {
		found = found || x.AccessorID == tok.AccessorID
	}
	if !found {
		t.Fatalf("list misses the token: %+v", list)
	}

	// A token without the management policy manages nothing, not even with operator: write.
	op := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessWrite, rule("", api.AccessWrite)))
	for _, req := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/v1/acl/policies", nil}, {http.MethodGet, "/v1/acl/policies/" + pol, nil},
		{http.MethodPost, "/v1/acl/policies", api.Policy{Name: uniqueName(t)}}, {http.MethodPut, "/v1/acl/policies/" + pol, api.Policy{}},
		{http.MethodDelete, "/v1/acl/policies/" + pol, nil}, {http.MethodGet, "/v1/acl/tokens", nil},
		{http.MethodGet, "/v1/acl/tokens/" + tok.AccessorID, nil}, {http.MethodPost, "/v1/acl/tokens", api.CreateTokenRequest{}},
		{http.MethodDelete, "/v1/acl/tokens/" + tok.AccessorID, nil},
	} {
		for _, ep := range eps {
			refused(t, doAs(t, op.SecretID, req.method, ep+req.path, req.body), http.StatusForbidden, "the management policy", op.SecretID)
		}
	}

	apiError(t, doAs(t, aclRoot, http.MethodPost, eps[1]+"/v1/acl/tokens", api.CreateTokenRequest{Policies: []string{"no-such-policy"}}), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, doAs(t, aclRoot, http.MethodPost, eps[1]+"/v1/acl/tokens", api.CreateTokenRequest{Policies: []string{pol, pol}}), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, doAs(t, aclRoot, http.MethodPost, eps[1]+"/v1/acl/tokens", `{"policies":[],"secret_id":"mine"}`), http.StatusBadRequest, api.CodeInvalidArgument)
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[1]+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusOK, nil)
	apiError(t, doAs(t, aclRoot, http.MethodGet, eps[0]+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusNotFound, api.CodeNotFound)
	apiError(t, doAs(t, aclRoot, http.MethodDelete, eps[0]+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusNotFound, api.CodeNotFound)

	// A deleted policy leaves its tokens.
	withPol := newToken(t, eps[0], pol)
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[0]+"/v1/acl/policies/"+pol, nil), http.StatusOK, nil)
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[0]+"/v1/acl/tokens/"+withPol.AccessorID, nil), http.StatusOK, &self)
	if len(self.Policies) != 0 {
		t.Fatalf("token after its policy was deleted: %+v", self)
	}
}

// The cluster keeps one management token at least: there is no second bootstrap.
func TestACLLastManagementTokenStays(t *testing.T) {
	eps := aclCluster(t)
	var self api.Token
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[0]+"/v1/acl/token/self", nil), http.StatusOK, &self)
	var list api.TokenList
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[0]+"/v1/acl/tokens", nil), http.StatusOK, &list)
	for _, x := range list.Tokens {
		if x.AccessorID != self.AccessorID && strings.Contains(strings.Join(x.Policies, ","), api.ManagementPolicy) {
			t.Skip("another test left a second management token")
		}
	}
	r := doAs(t, aclRoot, http.MethodDelete, eps[1]+"/v1/acl/tokens/"+self.AccessorID, nil)
	if eb := apiError(t, r, http.StatusForbidden, api.CodeForbidden); !strings.Contains(eb.Error.Message, "last token") {
		t.Fatalf("delete of the last management token: %q", eb.Error.Message)
	}
	second := newToken(t, eps[0], api.ManagementPolicy)
	ok(t, doAs(t, second.SecretID, http.MethodGet, eps[2]+"/v1/acl/tokens", nil), http.StatusOK, nil)
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[1]+"/v1/acl/tokens/"+second.AccessorID, nil), http.StatusOK, nil)
}

// Without --acl nothing changes: no token is asked for, and the ACL endpoints do not exist.
func TestWithoutACLTheACLEndpointsDoNotExist(t *testing.T) {
	ep := sharedCluster(t).Endpoints()[1]
	for _, path := range []string{"/v1/acl/bootstrap", "/v1/acl/policies", "/v1/acl/tokens", "/v1/acl/token/self"} {
		r := rawDo(http.MethodGet, ep+path, nil, nil)
		if r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
			t.Fatalf("GET %s without --acl: %d %s", path, r.status, short(r.body))
		}
	}
	apiError(t, rawDo(http.MethodPost, ep+"/v1/acl/bootstrap", nil, nil), http.StatusNotFound, api.CodeNotFound)
	// A token sent anyway is ignored, and holders are shown.
	name := lockName(t)
	s := session(t, ep)
	mustAcquire(t, ep, name, s, nil)
	var l api.Lock
	ok(t, rawDo(http.MethodGet, ep+"/v1/locks/"+name, nil, as("whatever")), http.StatusOK, &l)
	if l.Session != s {
		t.Fatalf("lock read without --acl: %+v", l)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(do(t, http.MethodGet, ep+"/v1/locks/"+name+"-free", nil).body, &raw)
	if string(raw["session"]) != `""` {
		t.Fatalf("a free lock's session without --acl: %s", raw["session"])
	}
}
