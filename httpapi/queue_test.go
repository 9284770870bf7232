package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/raftlock/raftlock/api"
)

// Who waits, and since when: a lock lists its queue in order, each entry with its session,
// the session's name, its mode and the time it joined, redacted under ACLs as holders are
// (the owner's sessions and operator:read show; another token sees the mode and time only);
// a waiting session lists the locks it waits for.
func TestACLQueueIsListedInOrderAndRedactedAsHolders(t *testing.T) {
	eps := aclCluster(t)
	pre := "queue/" + uniqueName(t) + "/"
	writes := newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessWrite))
	owner := newToken(t, eps[0], writes)
	rival := newToken(t, eps[0], writes)
	op := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessRead, rule(pre, api.AccessRead)))
	name := pre + "L"
	newSession := func(secret, sessionName string) string {
		var s api.Session
		ok(t, doAs(t, secret, http.MethodPost, eps[0]+"/v1/sessions", api.CreateSessionRequest{TTL: "30s", Name: sessionName}), http.StatusCreated, &s)
		return s.ID
	}
	holder := newSession(owner.SecretID, "holder")
	ok(t, doAs(t, owner.SecretID, http.MethodPost, eps[0]+"/v1/locks/"+name+"/acquire", api.AcquireRequest{Session: holder, Mode: api.ModeShared}), http.StatusOK, nil)
	// Two waiters in order: a writer of the owner's, then a reader of the rival's.
	writer, reader := newSession(owner.SecretID, "writer-1"), newSession(rival.SecretID, "reader-2")
	ctx := t.Context()
	hdrOwner, hdrRival := as(owner.SecretID), as(rival.SecretID)
	waits := make(chan response, 2)
	go func() {
		waits <- rawDoCtx(ctx, http.MethodPost, eps[0]+"/v1/locks/"+name+"/acquire", api.AcquireRequest{Session: writer, Wait: "30s"}, hdrOwner)
	}()
	eventually(t, "the writer to wait", func() string {
		if l := lockAs(t, aclRoot, eps[0], name); l.Waiters != 1 {
			return "not yet"
		}
		return ""
	})
	go func() {
		waits <- rawDoCtx(ctx, http.MethodPost, eps[0]+"/v1/locks/"+name+"/acquire", api.AcquireRequest{Session: reader, Wait: "30s", Mode: api.ModeShared}, hdrRival)
	}()
	eventually(t, "the reader to wait", func() string {
		if l := lockAs(t, aclRoot, eps[0], name); l.Waiters != 2 {
			return "not yet"
		}
		return ""
	})

	for _, ep := range eps {
		all := lockAs(t, op.SecretID, ep, name)
		if len(all.Queue) != 2 || all.Queue[0].Session != writer || all.Queue[0].Name != "writer-1" || all.Queue[0].Mode != api.ModeExclusive ||
			all.Queue[1].Session != reader || all.Queue[1].Name != "reader-2" || all.Queue[1].Mode != api.ModeShared {
			t.Fatalf("operator:read reads the queue %+v", all.Queue)
		}
		first, second := grantTime(t, all.Queue[0].Since), grantTime(t, all.Queue[1].Since)
		if second.Before(first) || first.Before(grantTime(t, all.Since)) {
			t.Fatalf("queue times %+v after the grant at %s", all.Queue, all.Since)
		}
		mine := lockAs(t, owner.SecretID, ep, name)
		if len(mine.Queue) != 2 || mine.Queue[0].Session != writer || mine.Queue[1].Session != "" || mine.Queue[1].Name != "" ||
			mine.Queue[1].Since != all.Queue[1].Since || mine.Queue[1].Mode != api.ModeShared {
			t.Fatalf("the owner reads the queue %+v, want the rival's entry without session and name", mine.Queue)
		}
		// The list answers the same.
		var list api.LockList
		ok(t, doAs(t, rival.SecretID, http.MethodGet, ep+"/v1/locks?prefix="+pre, nil), http.StatusOK, &list)
		if len(list.Locks) != 1 || len(list.Locks[0].Queue) != 2 || list.Locks[0].Queue[0].Session != "" || list.Locks[0].Queue[1].Session != reader {
			t.Fatalf("the rival lists %+v", list.Locks)
		}
		// A waiting session says what it waits for, and since when.
		var si api.SessionInfo
		ok(t, doAs(t, rival.SecretID, http.MethodGet, ep+"/v1/sessions/"+reader, nil), http.StatusOK, &si)
		if len(si.Locks) != 0 || len(si.Waiting) != 1 || si.Waiting[0].Lock != name || si.Waiting[0].Since != all.Queue[1].Since {
			t.Fatalf("the waiting session reads %+v", si)
		}
	}
	// End the waits (their sessions end), and let their answers come back.
	for _, s := range []string{writer, reader} {
		ok(t, doAs(t, aclRoot, http.MethodDelete, eps[0]+"/v1/sessions/"+s, nil), http.StatusOK, nil)
	}
	await(t, waits, "the writer's wait to end")
	await(t, waits, "the reader's wait to end")
}

// lockAs reads a lock with a token.
func lockAs(t *testing.T, secret, ep, name string) api.Lock {
	t.Helper()
	r := doAs(t, secret, http.MethodGet, ep+"/v1/locks/"+name, nil)
	ok(t, r, http.StatusOK, nil)
	var l api.Lock
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatal(err)
	}
	return l
}
