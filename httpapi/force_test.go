package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/raftlock/raftlock/api"
)

// A forced release ("force": true) names the grant by its token: a token no grant has, a
// session that is not the holder's, or an attempt are refused and change nothing; the right
// token ends the holding session and holds the lock back, the answer saying which session and
// for how long, through any node.
func TestForcedReleaseEndsTheHoldingSession(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	ep := followers[0]
	name := lockName(t)
	holder, other := session(t, leader), session(t, leader)
	g := mustAcquire(t, leader, name, holder, nil)
	url := ep + "/v1/locks/" + name + "/release"
	wrong := g.Token + 1
	apiError(t, do(t, http.MethodPost, url, api.ReleaseRequest{Token: &wrong, Force: true}), http.StatusConflict, api.CodeNotHolder)
	apiError(t, do(t, http.MethodPost, url, api.ReleaseRequest{Session: other, Token: &g.Token, Force: true}), http.StatusConflict, api.CodeNotHolder)
	apiError(t, do(t, http.MethodPost, url, api.ReleaseRequest{Token: &g.Token, Force: true, Attempt: "a"}), http.StatusBadRequest, api.CodeInvalidArgument)
	if l := getLock(t, leader, name, ""); !l.Held || l.Session != holder {
		t.Fatalf("after refused forced releases the lock is %+v", l)
	}
	var res api.ReleaseResponse
	ok(t, do(t, http.MethodPost, url, api.ReleaseRequest{Session: holder, Token: &g.Token, Force: true}), http.StatusOK, &res)
	if !res.Released || res.EndedSession != holder || len(res.HeldBack) != 1 || res.HeldBack[0] != name || res.AvailableIn == "" {
		t.Fatalf("forced release answered %+v", res)
	}
	apiError(t, do(t, http.MethodGet, leader+"/v1/sessions/"+holder, nil), http.StatusNotFound, api.CodeSessionNotFound)
	// Held back: free, but another session's acquire is refused lock_delayed.
	apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(other, "", nil)), http.StatusConflict, api.CodeLockDelayed, "available_in")
}

// Under --acl a forced release needs operator:write: write on the lock is not enough, nor is
// operator:read.
func TestACLForcedReleaseNeedsOperatorWrite(t *testing.T) {
	eps := aclCluster(t)
	name := "force/" + uniqueName(t)
	writer := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead, rule("force/", api.AccessWrite)))
	operator := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessWrite))
	s := sessionAs(t, eps[0], writer.SecretID)
	var g api.AcquireResponse
	ok(t, doAs(t, writer.SecretID, http.MethodPost, eps[0]+"/v1/locks/"+name+"/acquire", acquireReq(s, "", nil)), http.StatusOK, &g)
	for _, ep := range eps {
		refused(t, doAs(t, writer.SecretID, http.MethodPost, ep+"/v1/locks/"+name+"/release", api.ReleaseRequest{Token: &g.Token, Force: true}),
			http.StatusForbidden, "operator:write")
	}
	var res api.ReleaseResponse
	ok(t, doAs(t, operator.SecretID, http.MethodPost, eps[1]+"/v1/locks/"+name+"/release", api.ReleaseRequest{Token: &g.Token, Force: true}), http.StatusOK, &res)
	if res.EndedSession != s {
		t.Fatalf("forced release answered %+v", res)
	}
}
