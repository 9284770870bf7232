package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
)

func intp(n int) *int { return &n }

// kindAcquire is the body of an acquire with a limit (nil for none) and a mode.
func kindAcquire(session, wait string, limit *int, mode string) api.AcquireRequest {
	return api.AcquireRequest{Session: session, Wait: wait, Limit: limit, Mode: mode}
}

// A name used with "limit": N is held by up to N sessions, each under its own token; GET shows
// the limit and every holder (the top-level fields naming the newest), /check answers for any
// holder's token, and the next session is refused, or waits and is granted when a permit frees.
func TestSemaphoreThroughTheAPI(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	s1, s2, s3 := session(t, leader), session(t, followers[0]), session(t, followers[1])
	var g1, g2 api.AcquireResponse
	ok(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", api.AcquireRequest{Session: s1, Limit: intp(2), Value: strp("a")}), http.StatusOK, &g1)
	ok(t, do(t, http.MethodPost, followers[0]+"/v1/locks/"+name+"/acquire", kindAcquire(s2, "", intp(2), "")), http.StatusOK, &g2)
	if g2.Token <= g1.Token {
		t.Fatalf("tokens %d then %d", g1.Token, g2.Token)
	}
	r := do(t, http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", kindAcquire(s3, "", intp(2), ""))
	eb := apiError(t, r, http.StatusConflict, api.CodeLockHeld, "holder")
	if eb.Holder.Session != s2 || eb.Holder.Token != g2.Token {
		t.Fatalf("holder %+v, want the newest grant", eb.Holder)
	}
	for _, ep := range []string{leader, followers[1]} {
		r = do(t, http.MethodGet, ep+"/v1/locks/"+name, nil)
		var l api.Lock
		ok(t, r, http.StatusOK, &l)
		hasKeys(t, fields(t, r.body), "name", "held", "session", "token", "value", "waiters", "modify_index", "limit", "holders", "since")
		if len(l.Holders) == 2 {
			// Each grant has its own time, the newest's the lock's.
			first, newest := grantTime(t, l.Holders[0].Since), grantTime(t, l.Holders[1].Since)
			if newest.Before(first) || l.Since != l.Holders[1].Since {
				t.Fatalf("holders' times %q, %q and the lock's %q", l.Holders[0].Since, l.Holders[1].Since, l.Since)
			}
			l.Holders[0].Since, l.Holders[1].Since = "", ""
		}
		want := []api.LockHolder{{Session: s1, Token: g1.Token, Value: "a"}, {Session: s2, Token: g2.Token}}
		if l.Limit != 2 || !l.Held || l.Session != s2 || l.Token != g2.Token || fmt.Sprint(l.Holders) != fmt.Sprint(want) {
			t.Fatalf("GET %+v", l)
		}
		var raw struct{ Holders []map[string]json.RawMessage }
		if err := json.Unmarshal(r.body, &raw); err != nil || len(raw.Holders) != 2 {
			t.Fatalf("holders of %s: %v", r.body, err)
		}
		hasKeys(t, raw.Holders[0], "session", "token", "value", "since") // a semaphore's holders have no mode
	}
	for _, tok := range []uint64{g1.Token, g2.Token} {
		var cr api.CheckResponse
		ok(t, do(t, http.MethodGet, followers[0]+"/v1/locks/"+name+"/check?token="+fmt.Sprint(tok), nil), http.StatusOK, &cr)
		if !cr.Current || cr.Token != g2.Token {
			t.Fatalf("check of %d: %+v", tok, cr)
		}
	}
	// Another limit while the name is in use, and limits or modes that make no sense.
	eb = apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", kindAcquire(s3, "", intp(3), "")), http.StatusConflict, api.CodeLimitMismatch, "limit")
	if eb.Limit != 2 {
		t.Fatalf("limit_mismatch names limit %d", eb.Limit)
	}
	apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", kindAcquire(s3, "", nil, "")), http.StatusConflict, api.CodeLimitMismatch, "limit")
	for _, bad := range []api.AcquireRequest{
		kindAcquire(s3, "", intp(0), ""), kindAcquire(s3, "", intp(1001), ""), kindAcquire(s3, "", intp(-1), ""),
		kindAcquire(s3, "", intp(2), api.ModeShared), kindAcquire(s3, "", nil, "read"),
	} {
		apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", bad), http.StatusBadRequest, api.CodeInvalidArgument)
	}
	// The waiter gets the permit the release frees.
	ch := goDo(context.Background(), http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", kindAcquire(s3, "20s", intp(2), ""))
	waitWaiters(t, leader, name, 1)
	release(t, leader, name, s1, g1.Token)
	var g3 api.AcquireResponse
	ok(t, await(t, ch, "the waiter"), http.StatusOK, &g3)
	if l := getLock(t, leader, name, ""); len(l.Holders) != 2 || l.Holders[1].Session != s3 || l.Holders[1].Token != g3.Token {
		t.Fatalf("after the release: %+v", l)
	}
	// The list shows the holders too.
	var list api.LockList
	ok(t, do(t, http.MethodGet, followers[0]+"/v1/locks?prefix="+name, nil), http.StatusOK, &list)
	if len(list.Locks) != 1 || len(list.Locks[0].Holders) != 2 || list.Locks[0].Limit != 2 {
		t.Fatalf("list %+v", list)
	}
}

// "mode": "shared" holds coexist, an exclusive acquire waits for them all, and readers that come
// after a waiting writer wait behind it; each hold has its own token, and GET lists the holders
// with their modes. A lock held exclusively reads as before holders were listed.
func TestSharedLockThroughTheAPI(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	r1, r2, w, r3 := session(t, leader), session(t, followers[0]), session(t, followers[1]), session(t, leader)
	var g1, g2 api.AcquireResponse
	ok(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", kindAcquire(r1, "", nil, api.ModeShared)), http.StatusOK, &g1)
	ok(t, do(t, http.MethodPost, followers[0]+"/v1/locks/"+name+"/acquire", kindAcquire(r2, "", intp(1), api.ModeShared)), http.StatusOK, &g2)
	l := getLock(t, followers[1], name, "")
	if len(l.Holders) != 2 || l.Holders[0].Mode != api.ModeShared || l.Holders[1].Mode != api.ModeShared || l.Limit != 0 || l.Token != g2.Token {
		t.Fatalf("GET %+v", l)
	}
	apiError(t, do(t, http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", kindAcquire(w, "", nil, "")), http.StatusConflict, api.CodeLockHeld, "holder")
	writer := goDo(context.Background(), http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", kindAcquire(w, "20s", nil, api.ModeExclusive))
	waitWaiters(t, leader, name, 1)
	reader := goDo(context.Background(), http.MethodPost, leader+"/v1/locks/"+name+"/acquire", kindAcquire(r3, "20s", nil, api.ModeShared))
	waitWaiters(t, leader, name, 2)
	// A holder asking in the other mode is refused.
	apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", kindAcquire(r1, "", nil, "")), http.StatusConflict, api.CodeModeMismatch)
	release(t, leader, name, r1, g1.Token)
	pending(t, writer, "the writer while a reader holds")
	release(t, followers[0], name, r2, g2.Token)
	var gw api.AcquireResponse
	ok(t, await(t, writer, "the writer"), http.StatusOK, &gw)
	pending(t, reader, "the reader behind the writer")
	r := do(t, http.MethodGet, leader+"/v1/locks/"+name, nil)
	hasKeys(t, fields(t, r.body), "name", "held", "session", "token", "value", "waiters", "modify_index", "since", "queue")
	release(t, followers[1], name, w, gw.Token)
	var gr api.AcquireResponse
	ok(t, await(t, reader, "the reader"), http.StatusOK, &gr)
	if gr.Token <= gw.Token {
		t.Fatalf("reader token %d after writer token %d", gr.Token, gw.Token)
	}
}

// Under --acl each holder of a semaphore is redacted alike: a caller sees the sessions it owns
// and not the others', with every token.
func TestACLSemaphoreHoldersAreRedactedOneByOne(t *testing.T) {
	eps := aclCluster(t)
	pre := "acl/" + uniqueName(t) + "/"
	writes := newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessWrite))
	owner, rival := newToken(t, eps[0], writes), newToken(t, eps[0], writes)
	so, sr := sessionAs(t, eps[0], owner.SecretID), sessionAs(t, eps[0], rival.SecretID)
	name := pre + "S"
	var go1, gr1 api.AcquireResponse
	ok(t, doAs(t, owner.SecretID, http.MethodPost, eps[0]+"/v1/locks/"+name+"/acquire", kindAcquire(so, "", intp(3), "")), http.StatusOK, &go1)
	ok(t, doAs(t, rival.SecretID, http.MethodPost, eps[1]+"/v1/locks/"+name+"/acquire", kindAcquire(sr, "", intp(3), "")), http.StatusOK, &gr1)
	for _, who := range []struct {
		secret, mine, theirs string
		mineToken            uint64
		seesNewest           bool
	}{{owner.SecretID, so, sr, go1.Token, false}, {rival.SecretID, sr, so, gr1.Token, true}, {aclRoot, so, sr, go1.Token, true}} {
		r := doAs(t, who.secret, http.MethodGet, eps[2]+"/v1/locks/"+name, nil)
		ok(t, r, http.StatusOK, nil)
		var body struct {
			Session *string          `json:"session"`
			Holders []api.LockHolder `json:"holders"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if (body.Session != nil) != who.seesNewest || len(body.Holders) != 2 {
			t.Fatalf("as %s: %s", who.mine, r.body)
		}
		for _, h := range body.Holders {
			if h.Token == 0 || h.Session != "" && h.Session != who.mine && who.secret != aclRoot {
				t.Fatalf("as %s: holder %+v shown", who.mine, h)
			}
			if h.Token == who.mineToken && h.Session != who.mine {
				t.Fatalf("as %s: own holder %+v redacted", who.mine, h)
			}
		}
		if strings.Contains(string(r.body), who.theirs) && who.secret != aclRoot {
			t.Fatalf("as %s: the body names %s: %s", who.mine, who.theirs, r.body)
		}
	}
}
