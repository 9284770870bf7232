package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// These tests speak HTTP to a three-node cluster started with --acl, through the leader and
// through followers (which forward with the token), and check SECURITY.md's "Tokens and
// policies" and "What each request needs", row by row, allowed and refused.

func TestACLEveryRequestButTheOpenOnesNeedsAToken(t *testing.T) {
	eps := aclCluster(t)
	s := sessionAs(t, eps[0], aclRoot)
	guarded := []struct{ method, path string }{
		{http.MethodPost, "/v1/sessions"}, {http.MethodGet, "/v1/sessions"}, {http.MethodGet, "/v1/sessions/" + s},
		{http.MethodPut, "/v1/sessions/" + s + "/renew"}, {http.MethodDelete, "/v1/sessions/" + s},
		{http.MethodPost, "/v1/sessions/renew"}, {http.MethodGet, "/v1/locks"}, {http.MethodGet, "/v1/locks/a"},
		{http.MethodPost, "/v1/locks/a/acquire"}, {http.MethodPost, "/v1/locks/a/release"},
		{http.MethodDelete, "/v1/locks/a/acquire?session=" + s}, {http.MethodGet, "/v1/locks/a/check?token=1"},
		{http.MethodGet, "/v1/cluster"}, {http.MethodPost, "/v1/cluster/leadership-transfer"},
		{http.MethodDelete, "/v1/cluster/members/n9"}, {http.MethodGet, "/v1/acl/policies"},
		{http.MethodPost, "/v1/acl/tokens"}, {http.MethodGet, "/v1/acl/token/self"}, {http.MethodGet, "/v1/no-such-route"},
	}
	unknown := "00000000-0000-4000-8000-000000000000"
	for _, ep := range eps {
		for _, g := range guarded {
			for _, hdr := range []http.Header{nil, as(unknown), bearer(unknown), {"Authorization": {"Basic " + aclRoot}}, as("")} {
				r := rawDo(g.method, ep+g.path, `{}`, hdr)
				refused(t, r, http.StatusUnauthorized, "token", unknown)
			}
		}
		// The open ones: health checks, metrics, and the bootstrap (which answers for itself).
		for _, path := range []string{"/v1/health", "/v1/ready", "/metrics"} {
			if r := rawDo(http.MethodGet, ep+path, nil, nil); r.status != http.StatusOK {
				t.Fatalf("GET %s without a token: %d %s", path, r.status, short(r.body))
			}
		}
		// A token works in either header, and X-Raftlock-Token is read first.
		for _, hdr := range []http.Header{as(aclRoot), bearer(aclRoot), {"Authorization": {"bearer  " + aclRoot + " "}},
			{api.HeaderToken: {aclRoot}, "Authorization": {"Bearer " + unknown}}} {
			ok(t, rawDo(http.MethodGet, ep+"/v1/acl/token/self", nil, hdr), http.StatusOK, nil)
		}
	}
}

func TestACLBootstrapWorksOncePerCluster(t *testing.T) {
	eps := aclCluster(t) // bootstrapped by aclSettle
	for _, ep := range eps {
		for _, hdr := range []http.Header{nil, as(aclRoot)} {
			r := rawDo(http.MethodPost, ep+"/v1/acl/bootstrap", nil, hdr)
			eb := apiError(t, r, http.StatusForbidden, api.CodeForbidden)
			if !strings.Contains(eb.Error.Message, "already bootstrapped") {
				t.Fatalf("second bootstrap: %q", eb.Error.Message)
			}
		}
	}
	var self api.Token
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[1]+"/v1/acl/token/self", nil), http.StatusOK, &self)
	if strings.Join(self.Policies, ",") != api.ManagementPolicy {
		t.Fatalf("bootstrap token %+v", self)
	}
}

// Any token may create a session, which is its own: renew, destroy and GET need that token or
// management; GET /v1/sessions lists only the caller's own sessions unless operator: read.
func TestACLSessionsBelongToTheTokenThatMadeThem(t *testing.T) {
	eps := aclCluster(t)
	bare := newToken(t, eps[0]) // no policy at all
	other := newToken(t, eps[0])
	reader := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead))
	for _, ep := range eps {
		mine := sessionAs(t, ep, bare.SecretID)
		theirs := sessionAs(t, ep, other.SecretID)
		for _, op := range []struct{ method, path string }{{http.MethodGet, "/v1/sessions/" + mine}, {http.MethodPut, "/v1/sessions/" + mine + "/renew"}} {
			path := op.path
			ok(t, doAs(t, bare.SecretID, op.method, ep+path, nil), http.StatusOK, nil)
			ok(t, doAs(t, aclRoot, op.method, ep+path, nil), http.StatusOK, nil)
			refused(t, doAs(t, other.SecretID, op.method, ep+path, nil), http.StatusForbidden, "the token that created it", other.SecretID)
			refused(t, doAs(t, reader.SecretID, op.method, ep+path, nil), http.StatusForbidden, "the token that created it")
		}
		refused(t, doAs(t, other.SecretID, http.MethodPost, ep+"/v1/sessions/renew", api.RenewSessionsRequest{IDs: []string{theirs, mine}}),
			http.StatusForbidden, "the token that created it")
		var rr api.RenewSessionsResponse
		ok(t, doAs(t, other.SecretID, http.MethodPost, ep+"/v1/sessions/renew", api.RenewSessionsRequest{IDs: []string{theirs}}), http.StatusOK, &rr)
		if len(rr.Renewed) != 1 {
			t.Fatalf("batch renewal of its own session: %+v", rr)
		}

		listed := func(secret string) map[string]bool {
			var l api.SessionList
			ok(t, doAs(t, secret, http.MethodGet, ep+"/v1/sessions", nil), http.StatusOK, &l)
			out := map[string]bool{}
			for _, s := range l.Sessions {
				out[s.ID] = true
			}
			return out
		}
		if l := listed(bare.SecretID); !l[mine] || l[theirs] {
			t.Fatalf("the session list of a token shows %v, want its own %s only", l, mine)
		}
		if l := listed(reader.SecretID); !l[mine] || !l[theirs] {
			t.Fatalf("operator:read lists %v, want every session", l)
		}
		refused(t, doAs(t, other.SecretID, http.MethodDelete, ep+"/v1/sessions/"+mine, nil), http.StatusForbidden, "the token that created it")
		ok(t, doAs(t, bare.SecretID, http.MethodDelete, ep+"/v1/sessions/"+mine, nil), http.StatusOK, nil)
		ok(t, doAs(t, aclRoot, http.MethodDelete, ep+"/v1/sessions/"+theirs, nil), http.StatusOK, nil)
		apiError(t, doAs(t, other.SecretID, http.MethodGet, ep+"/v1/sessions/"+theirs, nil), http.StatusNotFound, api.CodeSessionNotFound)
	}
}

// acquire, release and cancel-wait need write on the lock and a session of the caller's own;
// a one-shot acquire with a ttl needs write, and its session is the caller's.
func TestACLLockWritesNeedWriteAndOwnSession(t *testing.T) {
	eps := aclCluster(t)
	pre := "acl/" + uniqueName(t) + "/"
	writer := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessWrite)))
	writer2 := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessWrite)))
	reader := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessRead)))
	for i, ep := range eps {
		name := fmt.Sprintf("%sL%d", pre, i)
		acquireURL, releaseURL := ep+"/v1/locks/"+name+"/acquire", ep+"/v1/locks/"+name+"/release"
		ws, ws2, rs := sessionAs(t, ep, writer.SecretID), sessionAs(t, ep, writer2.SecretID), sessionAs(t, ep, reader.SecretID)

		refused(t, doAs(t, reader.SecretID, http.MethodPost, acquireURL, acquireReq(rs, "", nil)), http.StatusForbidden, `write access to lock "`+name+`"`)
		refused(t, doAs(t, writer.SecretID, http.MethodPost, acquireURL, acquireReq(ws2, "", nil)), http.StatusForbidden, "the token that created it")
		refused(t, doAs(t, writer.SecretID, http.MethodPost, ep+"/v1/locks/other/"+name+"/acquire", acquireReq(ws, "", nil)), http.StatusForbidden, "write access")
		var g api.AcquireResponse
		ok(t, doAs(t, writer.SecretID, http.MethodPost, acquireURL, acquireReq(ws, "", strp("v"))), http.StatusOK, &g)

		// writer2 queues behind; only its own token may take it out of the queue.
		waiting := make(chan response, 1)
		go func() {
			waiting <- rawDo(http.MethodPost, acquireURL, acquireReq(ws2, "3s", nil), as(writer2.SecretID))
		}()
		eventually(t, "writer2 queued", func() string {
			var l api.Lock
			ok(t, doAs(t, writer.SecretID, http.MethodGet, ep+"/v1/locks/"+name, nil), http.StatusOK, &l)
			if l.Waiters != 1 {
				return fmt.Sprintf("%d waiters", l.Waiters)
			}
			return ""
		})
		cancelURL := acquireURL + "?session=" + ws2
		refused(t, doAs(t, writer.SecretID, http.MethodDelete, cancelURL, nil), http.StatusForbidden, "the token that created it")
		refused(t, doAs(t, reader.SecretID, http.MethodDelete, acquireURL+"?session="+rs, nil), http.StatusForbidden, "write access")
		var cr api.CancelAcquireResponse
		ok(t, doAs(t, writer2.SecretID, http.MethodDelete, cancelURL, nil), http.StatusOK, &cr)
		if !cr.Cancelled {
			t.Fatalf("cancel by the owner: %+v", cr)
		}
		if r := <-waiting; r.status != http.StatusConflict { // when its wait ends: lock_held
			t.Fatalf("the cancelled wait answered %d %s", r.status, short(r.body))
		}

		tok := g.Token
		rel := api.ReleaseRequest{Session: ws, Token: &tok}
		refused(t, doAs(t, reader.SecretID, http.MethodPost, releaseURL, rel), http.StatusForbidden, "write access")
		refused(t, doAs(t, writer2.SecretID, http.MethodPost, releaseURL, rel), http.StatusForbidden, "the token that created it")
		ok(t, doAs(t, writer.SecretID, http.MethodPost, releaseURL, rel), http.StatusOK, nil)

		// One-shot acquire: write needed; the session it makes belongs to the caller.
		refused(t, doAs(t, reader.SecretID, http.MethodPost, acquireURL, api.AcquireRequest{TTL: "10s"}), http.StatusForbidden, "write access")
		var one api.AcquireResponse
		ok(t, doAs(t, writer2.SecretID, http.MethodPost, acquireURL, api.AcquireRequest{TTL: "10s"}), http.StatusOK, &one)
		ok(t, doAs(t, writer2.SecretID, http.MethodGet, ep+"/v1/sessions/"+one.Session, nil), http.StatusOK, nil)
		refused(t, doAs(t, writer.SecretID, http.MethodGet, ep+"/v1/sessions/"+one.Session, nil), http.StatusForbidden, "the token that created it")
		// management may act for any session
		tok = one.Token
		ok(t, doAs(t, aclRoot, http.MethodPost, releaseURL, api.ReleaseRequest{Session: one.Session, Token: &tok}), http.StatusOK, nil)
	}
}

// GET of one lock and /check need read on it; a list shows only the locks the caller may read.
func TestACLLockReadsNeedRead(t *testing.T) {
	eps := aclCluster(t)
	pre := "acl/" + uniqueName(t) + "/"
	writer := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessWrite)))
	partial := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessRead), rule(pre+"hidden/", api.AccessDeny)))
	none := newToken(t, eps[0])
	s := sessionAs(t, eps[0], writer.SecretID)
	for _, n := range []string{"a", "b", "hidden/c"} {
		ok(t, doAs(t, writer.SecretID, http.MethodPost, eps[0]+"/v1/locks/"+pre+n+"/acquire", acquireReq(s, "", nil)), http.StatusOK, nil)
	}
	for _, ep := range eps {
		for _, q := range []string{"", "?consistency=stale"} {
			ok(t, doAs(t, partial.SecretID, http.MethodGet, ep+"/v1/locks/"+pre+"a"+q, nil), http.StatusOK, nil)
			ok(t, doAs(t, partial.SecretID, http.MethodGet, ep+"/v1/locks/"+pre+"a/check?token=1"+strings.Replace(q, "?", "&", 1), nil), http.StatusOK, nil)
			refused(t, doAs(t, partial.SecretID, http.MethodGet, ep+"/v1/locks/"+pre+"hidden/c"+q, nil), http.StatusForbidden, `read access to lock "`+pre+`hidden/c"`)
			refused(t, doAs(t, none.SecretID, http.MethodGet, ep+"/v1/locks/"+pre+"a/check?token=1", nil), http.StatusForbidden, "read access")
		}
		names := func(secret, prefix string) string {
			var l api.LockList
			ok(t, doAs(t, secret, http.MethodGet, ep+"/v1/locks?prefix="+prefix, nil), http.StatusOK, &l)
			var out []string
			for _, x := range l.Locks {
				out = append(out, strings.TrimPrefix(x.Name, pre))
			}
			return strings.Join(out, ",")
		}
		if got := names(partial.SecretID, pre); got != "a,b" {
			t.Fatalf("list for a token that may read part of the prefix: %q", got)
		}
		if got := names(partial.SecretID, ""); got != "a,b" {
			t.Fatalf("list of everything for that token: %q", got)
		}
		if got := names(none.SecretID, pre); got != "" {
			t.Fatalf("list for a token without rules: %q", got)
		}
		if got := names(aclRoot, pre); got != "a,b,hidden/c" {
			t.Fatalf("list for management: %q", got)
		}
	}
}

// The rule with the longest matching prefix wins, "" matches every name, and no match denies.
func TestACLLongestPrefixWinsThroughTheAPI(t *testing.T) {
	eps := aclCluster(t)
	pre := "acl/" + uniqueName(t) + "/"
	tok := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone,
		rule("", api.AccessRead), rule(pre, api.AccessWrite), rule(pre+"db/", api.AccessDeny), rule(pre+"db/open/", api.AccessWrite)))
	narrow := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre+"x", api.AccessWrite)))
	s := sessionAs(t, eps[0], tok.SecretID)
	sn := sessionAs(t, eps[0], narrow.SecretID)
	for _, c := range []struct {
		secret, session, name string
		status                int
	}{
		{tok.SecretID, s, pre + "jobs", http.StatusOK},
		{tok.SecretID, s, pre + "db/x", http.StatusForbidden},
		{tok.SecretID, s, pre + "db/open/x", http.StatusOK},
		{tok.SecretID, s, "elsewhere/x", http.StatusForbidden}, // "" gives read only
		{narrow.SecretID, sn, pre + "xy", http.StatusOK},
		{narrow.SecretID, sn, pre + "y", http.StatusForbidden}, // no rule matches: deny
	} {
		r := doAs(t, c.secret, http.MethodPost, eps[1]+"/v1/locks/"+c.name+"/acquire", acquireReq(c.session, "", nil))
		if r.status != c.status {
			t.Fatalf("acquire of %s: %d %s, want %d", c.name, r.status, short(r.body), c.status)
		}
	}
	ok(t, doAs(t, tok.SecretID, http.MethodGet, eps[1]+"/v1/locks/elsewhere/x", nil), http.StatusOK, nil)
	refused(t, doAs(t, narrow.SecretID, http.MethodGet, eps[1]+"/v1/locks/elsewhere/x", nil), http.StatusForbidden, "read access")
}

// GET /v1/cluster needs operator: read; members and leadership transfer need operator: write.
func TestACLClusterNeedsOperator(t *testing.T) {
	eps := aclCluster(t)
	opRead := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead))
	opWrite := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessWrite))
	lockWriter := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule("", api.AccessWrite)))
	var cl api.Cluster
	ok(t, doAs(t, opRead.SecretID, http.MethodGet, eps[1]+"/v1/cluster", nil), http.StatusOK, &cl)
	refused(t, doAs(t, lockWriter.SecretID, http.MethodGet, eps[1]+"/v1/cluster", nil), http.StatusForbidden, "operator:read")
	var self api.Member
	for _, m := range cl.Members {
		if m.Leader {
			self = m
		}
	}
	writes := []struct {
		method, path string
		body         any
		allowed      int
	}{
		// Re-adding a member as it is changes nothing; removing an unknown one gets past the check.
		{http.MethodPost, "/v1/cluster/members", api.AddMemberRequest{ID: self.ID, RaftAddr: self.RaftAddr, HTTPAddr: self.HTTPAddr}, http.StatusOK},
		{http.MethodDelete, "/v1/cluster/members/n9", nil, http.StatusNotFound},
	}
	for _, ep := range eps {
		for _, w := range writes {
			refused(t, doAs(t, opRead.SecretID, w.method, ep+w.path, w.body), http.StatusForbidden, "operator:write")
			refused(t, doAs(t, lockWriter.SecretID, w.method, ep+w.path, w.body), http.StatusForbidden, "operator:write")
			if r := doAs(t, opWrite.SecretID, w.method, ep+w.path, w.body); r.status != w.allowed {
				t.Fatalf("%s %s with operator:write: %d %s", w.method, w.path, r.status, short(r.body))
			}
		}
		refused(t, doAs(t, opRead.SecretID, http.MethodPost, ep+"/v1/cluster/leadership-transfer", nil), http.StatusForbidden, "operator:write")
	}
	var tr api.TransferResponse
	ok(t, doAs(t, opWrite.SecretID, http.MethodPost, eps[1]+"/v1/cluster/leadership-transfer", nil), http.StatusOK, &tr)
	if err := settleWith(aclShared.Get(t), as(aclRoot)); err != nil {
		t.Fatal(err)
	}
}

// A holder's session id is shown only to the session's owner and to operator: read; others
// get the holder's token and value, never its session, in every answer that names a holder.
func TestACLHoldersAreRedactedForOthers(t *testing.T) {
	eps := aclCluster(t)
	pre := "acl/" + uniqueName(t) + "/"
	writes := newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessWrite))
	owner := newToken(t, eps[0], writes)
	rival := newToken(t, eps[0], writes)
	op := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead, rule(pre, api.AccessRead)))
	opWriter := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead, rule(pre, api.AccessWrite)))
	s := sessionAs(t, eps[0], owner.SecretID)
	name := pre + "L"
	var g api.AcquireResponse
	ok(t, doAs(t, owner.SecretID, http.MethodPost, eps[0]+"/v1/locks/"+name+"/acquire", acquireReq(s, "", strp("host-a"))), http.StatusOK, &g)
	rs := sessionAs(t, eps[0], rival.SecretID)

	for _, ep := range eps {
		for _, who := range []struct {
			secret string
			sees   bool
		}{{owner.SecretID, true}, {op.SecretID, true}, {aclRoot, true}, {rival.SecretID, false}} {
			check := func(what string, obj map[string]json.RawMessage) {
				t.Helper()
				_, shown := obj["session"]
				if shown != who.sees || shown && string(obj["session"]) != `"`+s+`"` {
					t.Fatalf("%s: session shown=%v (%s), want %v", what, shown, obj["session"], who.sees)
				}
				if string(obj["token"]) != fmt.Sprint(g.Token) {
					t.Fatalf("%s: token %s, want %d", what, obj["token"], g.Token)
				}
			}
			for _, q := range []string{"", "?consistency=stale"} {
				r := doAs(t, who.secret, http.MethodGet, ep+"/v1/locks/"+name+q, nil)
				ok(t, r, http.StatusOK, nil)
				lock := fields(t, r.body)
				check("GET lock", lock)
				if string(lock["value"]) != `"host-a"` {
					t.Fatalf("value hidden: %s", r.body)
				}
				r = doAs(t, who.secret, http.MethodGet, ep+"/v1/locks?prefix="+pre+strings.Replace(q, "?", "&", 1), nil)
				ok(t, r, http.StatusOK, nil)
				var list struct{ Locks []map[string]json.RawMessage }
				if err := json.Unmarshal(r.body, &list); err != nil || len(list.Locks) != 1 {
					t.Fatalf("list %s: %v", r.body, err)
				}
				check("list", list.Locks[0])
			}
		}
		// A refused acquire names the holder in its 409: the rival sees no session.
		r := doAs(t, rival.SecretID, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(rs, "", nil))
		apiError(t, r, http.StatusConflict, api.CodeLockHeld, "holder")
		holder := fields(t, fields(t, r.body)["holder"])
		if _, shown := holder["session"]; shown || string(holder["token"]) != fmt.Sprint(g.Token) {
			t.Fatalf("409 holder for another token: %s", r.body)
		}
		if strings.Contains(string(r.body), s) {
			t.Fatalf("the 409 names the holding session in its message: %s", r.body)
		}
		// ...and a wait that times out does the same.
		r = doAs(t, rival.SecretID, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(rs, "50ms", nil))
		apiError(t, r, http.StatusConflict, api.CodeLockHeld, "holder")
		if strings.Contains(string(r.body), s) {
			t.Fatalf("a timed-out wait names the holding session: %s", r.body)
		}
		// An operator that may write sees the holder's session in the 409.
		ows := sessionAs(t, ep, opWriter.SecretID)
		r = doAs(t, opWriter.SecretID, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(ows, "", nil))
		apiError(t, r, http.StatusConflict, api.CodeLockHeld, "holder")
		if h := fields(t, fields(t, r.body)["holder"]); string(h["session"]) != `"`+s+`"` {
			t.Fatalf("409 holder for operator:read: %s", r.body)
		}
	}
	// Fencing still works for everyone who may read: /check with the token.
	var cr api.CheckResponse
	ok(t, doAs(t, rival.SecretID, http.MethodGet, eps[2]+"/v1/locks/"+name+"/check?token="+fmt.Sprint(g.Token), nil), http.StatusOK, &cr)
	if !cr.Current {
		t.Fatalf("check: %+v", cr)
	}
}

// Deleting a token refuses it on every node at once; its sessions stay, and only management
// may renew or end them.
func TestACLDeletedTokenIsRefusedEverywhere(t *testing.T) {
	eps := aclCluster(t)
	pre := "acl/" + uniqueName(t) + "/"
	tok := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead, rule(pre, api.AccessWrite)))
	s := sessionAs(t, eps[1], tok.SecretID)
	for _, ep := range eps {
		ok(t, doAs(t, tok.SecretID, http.MethodGet, ep+"/v1/sessions/"+s, nil), http.StatusOK, nil)
	}
	var del api.DeleteResponse
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[2]+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusOK, &del)
	if !del.Deleted {
		t.Fatalf("delete answered %+v", del)
	}
	for _, ep := range eps {
		for _, req := range []struct{ method, path string }{
			{http.MethodGet, "/v1/sessions/" + s}, {http.MethodPut, "/v1/sessions/" + s + "/renew"},
			{http.MethodPost, "/v1/sessions"}, {http.MethodGet, "/v1/locks/" + pre + "x"}, {http.MethodGet, "/v1/cluster"},
			{http.MethodGet, "/v1/acl/token/self"},
		} {
			refused(t, doAs(t, tok.SecretID, req.method, ep+req.path, nil), http.StatusUnauthorized, "unknown", tok.SecretID)
		}
	}
	// A stale read is answered from the node's own state, which applies the delete soon after.
	for _, ep := range eps {
		eventually(t, "a stale read refuses the deleted token", func() string {
			if r := doAs(t, tok.SecretID, http.MethodGet, ep+"/v1/locks/"+pre+"x?consistency=stale", nil); r.status != http.StatusUnauthorized {
				return fmt.Sprint(r.status)
			}
			return ""
		})
	}
	var info api.SessionInfo
	ok(t, doAs(t, aclRoot, http.MethodGet, eps[1]+"/v1/sessions/"+s, nil), http.StatusOK, &info)
	ok(t, doAs(t, aclRoot, http.MethodPut, eps[1]+"/v1/sessions/"+s+"/renew", nil), http.StatusOK, nil)
	other := newToken(t, eps[0])
	refused(t, doAs(t, other.SecretID, http.MethodPut, eps[1]+"/v1/sessions/"+s+"/renew", nil), http.StatusForbidden, "the token that created it")
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[1]+"/v1/sessions/"+s, nil), http.StatusOK, nil)
}

// Deleting a token drops the queue entries of the sessions it owns in the same command: a
// blocking acquire admitted under the token is answered at once (401, its token is gone)
// instead of being granted later, and the lock goes to the next waiter.
func TestTokenDeleteEndsItsSessionsWaits(t *testing.T) {
	eps := aclCluster(t)
	leader, follower := eps[0], eps[1]
	name := "td/" + uniqueName(t)
	pol := newPolicy(t, leader, "none", rule("td/", "write"))
	doomed, other := newToken(t, leader, pol), newToken(t, leader, pol)
	holder := sessionAs(t, leader, other.SecretID)
	var g api.AcquireResponse
	ok(t, doAs(t, other.SecretID, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(holder, "", nil)), http.StatusOK, &g)
	waiter := sessionAs(t, leader, doomed.SecretID)
	next := sessionAs(t, leader, other.SecretID)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	blocked := make(chan response, 1)
	go func() {
		blocked <- rawDoCtx(ctx, http.MethodPost, follower+"/v1/locks/"+name+"/acquire", acquireReq(waiter, "50s", nil), as(doomed.SecretID))
	}()
	waitWaitersAs(t, leader, name, 1)
	queued := make(chan response, 1)
	go func() {
		queued <- rawDoCtx(ctx, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(next, "50s", nil), as(other.SecretID))
	}()
	waitWaitersAs(t, leader, name, 2)
	ok(t, doAs(t, aclRoot, http.MethodDelete, leader+"/v1/acl/tokens/"+doomed.AccessorID, nil), http.StatusOK, nil)
	refused(t, await(t, blocked, "the deleted token's blocking acquire"), http.StatusUnauthorized, "token", doomed.SecretID)
	ok(t, doAs(t, other.SecretID, http.MethodPost, leader+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: holder, Token: &g.Token}), http.StatusOK, nil)
	var granted api.AcquireResponse
	ok(t, await(t, queued, "the next waiter"), http.StatusOK, &granted)
	if granted.Session != next {
		t.Fatalf("the lock went to %s, want the next waiter %s", granted.Session, next)
	}
}

// waitWaitersAs waits until the lock has n waiters, reading it with the root token.
func waitWaitersAs(t *testing.T, ep, name string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d waiters on %q", n, name), func() string {
		var l api.Lock
		r := doAs(t, aclRoot, http.MethodGet, ep+"/v1/locks/"+name, nil)
		if r.status != http.StatusOK || json.Unmarshal(r.body, &l) != nil || l.Waiters != n {
			return fmt.Sprintf("%d %s", r.status, short(r.body))
		}
		return ""
	})
}

// An operator (operator:write) may end a session of another token, as its owner may; a token
// with operator:read only, or none, may not, and a session that does not exist is not found.
func TestACLOperatorWriteMayEndAnySession(t *testing.T) {
	eps := aclCluster(t)
	owner := newToken(t, eps[0])
	reader := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead))
	operator := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessWrite))
	for _, ep := range eps {
		theirs := sessionAs(t, ep, owner.SecretID)
		refused(t, doAs(t, reader.SecretID, http.MethodDelete, ep+"/v1/sessions/"+theirs, nil), http.StatusForbidden, "operator:write")
		var d api.DestroyResponse
		ok(t, doAs(t, operator.SecretID, http.MethodDelete, ep+"/v1/sessions/"+theirs, nil), http.StatusOK, &d)
		apiError(t, doAs(t, owner.SecretID, http.MethodGet, ep+"/v1/sessions/"+theirs, nil), http.StatusNotFound, api.CodeSessionNotFound)
		apiError(t, doAs(t, operator.SecretID, http.MethodDelete, ep+"/v1/sessions/"+theirs, nil), http.StatusNotFound, api.CodeSessionNotFound)
		// Renewing stays the owner's (and management's): an operator ends sessions, it does
		// not keep them alive.
		mine := sessionAs(t, ep, owner.SecretID)
		refused(t, doAs(t, operator.SecretID, http.MethodPut, ep+"/v1/sessions/"+mine+"/renew", nil), http.StatusForbidden, "the token that created it")
	}
}
