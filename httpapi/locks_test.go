package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"github.com/raftlock/raftlock/api"
)

func TestAcquireFreeLock(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[0]
	s := session(t, ep)
	name := lockName(t)
	r := do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", map[string]string{"session": s, "value": "host-a:8080"})
	ok(t, r, http.StatusOK, nil)
	hasKeys(t, fields(t, r.body), "name", "session", "token", "value")
	var g api.AcquireResponse
	if err := json.Unmarshal(r.body, &g); err != nil {
		t.Fatal(err)
	}
	if g.Name != name || g.Session != s || g.Value != "host-a:8080" || g.Token == 0 || g.Token > indexHeader(t, r) {
		t.Fatalf("grant %+v (index header %d)", g, indexHeader(t, r))
	}
	l := getLock(t, ep, name, "")
	grantTime(t, l.Since)
	want := api.Lock{Name: name, Held: true, Session: s, Token: g.Token, Value: "host-a:8080", ModifyIndex: g.Token, Since: l.Since}
	if !reflect.DeepEqual(l, want) {
		t.Fatalf("GET lock = %+v, want %+v", l, want)
	}
}

func TestAcquireHeldLock(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	holder, other := session(t, leader), session(t, followers[0])
	name := lockName(t)
	g := mustAcquire(t, leader, name, holder, strp("v1"))
	for _, ep := range []string{leader, followers[0], followers[1]} {
		for _, wait := range []string{"", "0s"} {
			r := do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(other, wait, strp("v2")))
			eb := apiError(t, r, http.StatusConflict, api.CodeLockHeld, "holder")
			hasKeys(t, fields(t, fields(t, r.body)["holder"]), "session", "token")
			if *eb.Holder != (api.Holder{Session: holder, Token: g.Token}) {
				t.Fatalf("holder %+v, want %s/%d", eb.Holder, holder, g.Token)
			}
		}
	}
	// Nothing changed, and a try-acquire never queues.
	l := getLock(t, leader, name, "")
	if l.Session != holder || l.Token != g.Token || l.Value != "v1" || l.Waiters != 0 {
		t.Fatalf("lock after refused acquires: %+v", l)
	}
}

func TestReacquireIsIdempotent(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := session(t, leader)
	name := lockName(t)
	g := mustAcquire(t, leader, name, s, strp("first"))
	before := getLock(t, leader, name, "")

	// A new value replaces the stored one and bumps modify_index; the token stays.
	g2 := mustAcquire(t, followers[0], name, s, strp("second"))
	if g2.Token != g.Token || g2.Value != "second" {
		t.Fatalf("re-acquire with a new value = %+v, first grant %+v", g2, g)
	}
	after := getLock(t, leader, name, "")
	if after.Value != "second" || after.Token != g.Token || after.ModifyIndex <= before.ModifyIndex || after.Waiters != 0 {
		t.Fatalf("lock after re-acquire %+v, before %+v", after, before)
	}

	// Without a value the stored value is kept.
	g3 := mustAcquire(t, leader, name, s, nil)
	if g3.Token != g.Token || g3.Value != "second" {
		t.Fatalf("re-acquire without a value = %+v", g3)
	}
	// With wait it is still answered at once with the same grant, never queued.
	var g4 api.AcquireResponse
	ok(t, do(t, http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", acquireReq(s, "30s", nil)), http.StatusOK, &g4)
	if g4 != g3 {
		t.Fatalf("re-acquire with wait = %+v, want %+v", g4, g3)
	}
	if l := getLock(t, leader, name, ""); l.Value != "second" || l.Token != g.Token || l.Waiters != 0 {
		t.Fatalf("lock %+v", l)
	}
}

func TestAcquireWithTTLCreatesSession(t *testing.T) {
	d := sharedCluster(t)
	_, followers := roles(t, d)
	ep := followers[0]
	name := lockName(t)
	r := do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", map[string]string{"ttl": "15s", "value": "x"})
	ok(t, r, http.StatusOK, nil)
	hasKeys(t, fields(t, r.body), "name", "session", "token", "value")
	var g api.AcquireResponse
	if err := json.Unmarshal(r.body, &g); err != nil {
		t.Fatal(err)
	}
	if !hexID.MatchString(g.Session) || g.Name != name || g.Token == 0 || g.Value != "x" {
		t.Fatalf("grant %s", r.body)
	}
	var s api.SessionInfo
	ok(t, do(t, http.MethodGet, ep+"/v1/sessions/"+g.Session, nil), http.StatusOK, &s)
	if s.TTL != "15s" || !slices.Equal(s.Locks, []string{name}) || s.CreatedIndex >= g.Token {
		t.Fatalf("created session %+v, grant %+v", s, g)
	}
	// It is a session like any other: renew it and release through it.
	ok(t, do(t, http.MethodPut, ep+"/v1/sessions/"+g.Session+"/renew", nil), http.StatusOK, nil)
	release(t, ep, name, g.Session, g.Token)

	// A ttl out of range is refused before anything is created.
	for _, ttl := range []string{"1s", "25h", "abc"} {
		apiError(t, do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", map[string]string{"ttl": ttl}), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestAcquireArgumentErrors(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[1]
	name := lockName(t)
	url := ep + "/v1/locks/" + name + "/acquire"
	for _, body := range []string{`{}`, `{"value":"x"}`, `{"wait":"1s"}`, ``} {
		apiError(t, do(t, http.MethodPost, url, body), http.StatusBadRequest, api.CodeInvalidArgument)
	}
	for _, sess := range []string{"0123456789abcdef0123456789abcdef", "nope"} {
		apiError(t, do(t, http.MethodPost, url, map[string]string{"session": sess}), http.StatusNotFound, api.CodeSessionNotFound)
	}
	// A destroyed session is unknown too.
	s := session(t, ep)
	ok(t, do(t, http.MethodDelete, ep+"/v1/sessions/"+s, nil), http.StatusOK, nil)
	apiError(t, do(t, http.MethodPost, url, map[string]string{"session": s}), http.StatusNotFound, api.CodeSessionNotFound)
	apiError(t, do(t, http.MethodPost, url, map[string]string{"session": s, "wait": "5s"}), http.StatusNotFound, api.CodeSessionNotFound)
	if l := getLock(t, ep, name, ""); l.Held || l.Waiters != 0 {
		t.Fatalf("refused acquires changed the lock: %+v", l)
	}
}

func TestRelease(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	holder, other := session(t, leader), session(t, leader)
	name := lockName(t)
	g := mustAcquire(t, leader, name, holder, strp("v"))
	url := followers[0] + "/v1/locks/" + name + "/release"

	wrongToken := g.Token + 1
	apiError(t, do(t, http.MethodPost, url, api.ReleaseRequest{Session: holder, Token: &wrongToken}), http.StatusConflict, api.CodeNotHolder)
	apiError(t, do(t, http.MethodPost, url, api.ReleaseRequest{Session: other, Token: &g.Token}), http.StatusConflict, api.CodeNotHolder)
	apiError(t, do(t, http.MethodPost, url, api.ReleaseRequest{Session: "0123456789abcdef0123456789abcdef", Token: &g.Token}), http.StatusNotFound, api.CodeSessionNotFound)
	apiError(t, do(t, http.MethodPost, url, map[string]any{"session": holder}), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodPost, url, map[string]any{"token": g.Token}), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodPost, url, map[string]any{"session": holder, "token": "7"}), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodPost, url, map[string]any{"session": holder, "token": -1}), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodPost, url, ""), http.StatusBadRequest, api.CodeInvalidArgument)
	if l := getLock(t, leader, name, ""); !l.Held || l.Session != holder || l.Token != g.Token {
		t.Fatalf("refused releases changed the lock: %+v", l)
	}

	release(t, followers[1], name, holder, g.Token)
	if l := getLock(t, leader, name, ""); l.Held || l.Session != "" || l.Token != 0 {
		t.Fatalf("lock after release: %+v", l)
	}
	// Releasing again, or a lock never taken, is not_holder.
	apiError(t, do(t, http.MethodPost, url, api.ReleaseRequest{Session: holder, Token: &g.Token}), http.StatusConflict, api.CodeNotHolder)
	apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+lockName(t)+"/release", api.ReleaseRequest{Session: holder, Token: &g.Token}), http.StatusConflict, api.CodeNotHolder)

	// The released lock can be taken again, under a larger token.
	g2 := mustAcquire(t, leader, name, other, nil)
	if g2.Token <= g.Token || g2.Value != "" {
		t.Fatalf("grant after release %+v, first %+v", g2, g)
	}
	var s api.SessionInfo
	ok(t, do(t, http.MethodGet, leader+"/v1/sessions/"+holder, nil), http.StatusOK, &s)
	if len(s.Locks) != 0 {
		t.Fatalf("session still lists %v after release", s.Locks)
	}
}

func TestGetLock(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	never := lockName(t)
	for _, ep := range []string{leader, followers[0]} {
		for _, q := range []string{"", "?consistency=stale"} {
			r := do(t, http.MethodGet, ep+"/v1/locks/"+never+q, nil)
			ok(t, r, http.StatusOK, nil)
			hasKeys(t, fields(t, r.body), "name", "held", "session", "token", "value", "waiters", "modify_index")
			var l api.Lock
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatal(err)
			}
			if l.Name != never || l.Held || l.Session != "" || l.Token != 0 || l.Value != "" || l.Waiters != 0 {
				t.Fatalf("a lock never taken reads %s", r.body)
			}
		}
	}

	s := session(t, leader)
	name := lockName(t)
	g := mustAcquire(t, leader, name, s, strp("val"))
	want := api.Lock{Name: name, Held: true, Session: s, Token: g.Token, Value: "val", ModifyIndex: g.Token}
	want.Since = getLock(t, leader, name, "").Since
	grantTime(t, want.Since)
	// Linearizable by default, from any node (every node reads the grant's time alike).
	for _, ep := range followers {
		if l := getLock(t, ep, name, ""); !reflect.DeepEqual(l, want) {
			t.Fatalf("GET via %s = %+v, want %+v", ep, l, want)
		}
	}
	// A stale read is answered locally and catches up.
	for _, ep := range followers {
		eventually(t, "stale read on "+ep, func() string {
			r := do(t, http.MethodGet, ep+"/v1/locks/"+name+"?consistency=stale", nil)
			var l api.Lock
			ok(t, r, http.StatusOK, &l)
			if !reflect.DeepEqual(l, want) {
				return fmt.Sprintf("%+v", l)
			}
			if r.header.Get(api.HeaderIndex) == "" {
				return "no index header"
			}
			return ""
		})
	}
}

func TestCheck(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := session(t, leader)
	name := lockName(t)
	check := func(ep, q string) api.CheckResponse {
		t.Helper()
		r := do(t, http.MethodGet, ep+"/v1/locks/"+name+"/check"+q, nil)
		ok(t, r, http.StatusOK, nil)
		hasKeys(t, fields(t, r.body), "current", "token")
		var c api.CheckResponse
		if err := json.Unmarshal(r.body, &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, q := range []string{"?token=5", "?token=0"} {
		if c := check(leader, q); c != (api.CheckResponse{}) {
			t.Fatalf("check%s of a free lock = %+v", q, c)
		}
	}
	g := mustAcquire(t, leader, name, s, nil)
	for _, ep := range []string{leader, followers[0]} {
		if c := check(ep, fmt.Sprintf("?token=%d", g.Token)); c != (api.CheckResponse{Current: true, Token: g.Token}) {
			t.Fatalf("check with the holder's token = %+v", c)
		}
		for _, tok := range []uint64{g.Token - 1, g.Token + 1, 0} {
			if c := check(ep, fmt.Sprintf("?token=%d", tok)); c != (api.CheckResponse{Current: false, Token: g.Token}) {
				t.Fatalf("check with token %d = %+v, holder's token %d", tok, c, g.Token)
			}
		}
	}
	release(t, leader, name, s, g.Token)
	for _, q := range []string{fmt.Sprintf("?token=%d", g.Token), "?token=0"} {
		if c := check(followers[1], q); c != (api.CheckResponse{}) {
			t.Fatalf("check%s after release = %+v", q, c)
		}
	}
	for _, q := range []string{"", "?token=", "?token=abc", "?token=-1"} {
		apiError(t, do(t, http.MethodGet, leader+"/v1/locks/"+name+"/check"+q, nil), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestListLocks(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s, w := session(t, leader), session(t, leader)
	prefix := lockName(t) + "/"
	held, freed, awaited := prefix+"a", prefix+"b", prefix+"c"
	gh := mustAcquire(t, leader, held, s, strp("A"))
	gf := mustAcquire(t, leader, freed, s, nil)
	release(t, leader, freed, s, gf.Token)
	ga := mustAcquire(t, leader, awaited, s, nil)
	getLock(t, leader, prefix+"never", "")
	mustAcquire(t, leader, lockName(t), s, nil) // outside the prefix

	// A waiter on the third lock, cut off by the end of the test.
	ctx := t.Context()
	waiting := goDo(ctx, http.MethodPost, followers[0]+"/v1/locks/"+awaited+"/acquire", acquireReq(w, "30s", nil))
	waitWaiters(t, leader, awaited, 1)

	for _, ep := range []string{leader, followers[1]} {
		r := do(t, http.MethodGet, ep+"/v1/locks?prefix="+prefix, nil)
		ok(t, r, http.StatusOK, nil)
		hasKeys(t, fields(t, r.body), "locks")
		for _, raw := range rawList(t, r.body, "locks") {
			hasKeys(t, without(fields(t, raw), "since", "queue"), "name", "held", "session", "token", "value", "waiters", "modify_index")
		}
		var list api.LockList
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Locks) != 2 {
			t.Fatalf("listed %s, want only %s and %s", r.body, held, awaited)
		}
		byName := map[string]api.Lock{}
		for _, l := range list.Locks {
			byName[l.Name] = l
		}
		if l := byName[held]; !reflect.DeepEqual(l, api.Lock{Name: held, Held: true, Session: s, Token: gh.Token, Value: "A", ModifyIndex: gh.Token, Since: l.Since}) {
			t.Fatalf("listed %+v", l)
		}
		grantTime(t, byName[held].Since)
		l := byName[awaited]
		if !l.Held || l.Session != s || l.Token != ga.Token || l.Waiters != 1 {
			t.Fatalf("listed %+v", l)
		}
		// Who waits, and since when: the queue in order, with its mode.
		if len(l.Queue) != 1 || l.Queue[0].Session != w || l.Queue[0].Mode != api.ModeExclusive ||
			grantTime(t, l.Queue[0].Since).Before(grantTime(t, l.Since)) {
			t.Fatalf("queue of %s: %+v (granted since %s)", awaited, l.Queue, l.Since)
		}
	}
	// An unknown prefix lists nothing, as an empty array.
	r := do(t, http.MethodGet, leader+"/v1/locks?prefix="+prefix+"zzz", nil)
	ok(t, r, http.StatusOK, nil)
	if string(fields(t, r.body)["locks"]) != "[]" {
		t.Fatalf("empty list: %s", r.body)
	}
	release(t, leader, awaited, s, ga.Token)
	if r := await(t, waiting, "waiter"); r.status != http.StatusOK {
		t.Fatalf("waiter: %d %s", r.status, r.body)
	}
}
