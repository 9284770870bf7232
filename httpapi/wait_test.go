package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

func TestWaitersGrantedInFIFOOrder(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	h := session(t, leader)
	gh := mustAcquire(t, leader, name, h, strp("h"))

	// Three waiters arrive one after the other, through different nodes.
	eps := []string{followers[0], leader, followers[1]}
	var sessions []string
	var answers []<-chan response
	for i, ep := range eps {
		s := session(t, leader)
		sessions = append(sessions, s)
		answers = append(answers, goDo(t.Context(), http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s, "30s", strp(fmt.Sprint("w", i)))))
		waitWaiters(t, leader, name, i+1)
	}

	prev, prevSession := gh.Token, h
	for i := range sessions {
		for j := i; j < len(answers); j++ {
			pending(t, answers[j], fmt.Sprintf("waiter %d before its turn", j))
		}
		r := do(t, http.MethodPost, leader+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: prevSession, Token: &prev})
		ok(t, r, http.StatusOK, nil)
		releaseIndex := indexHeader(t, r)

		var g api.AcquireResponse
		ok(t, await(t, answers[i], fmt.Sprint("waiter ", i)), http.StatusOK, &g)
		want := api.AcquireResponse{Name: name, Session: sessions[i], Token: g.Token, Value: fmt.Sprint("w", i)}
		if g != want || g.Token <= prev || g.Token > releaseIndex {
			t.Fatalf("waiter %d got %+v; previous token %d, release applied at %d", i, g, prev, releaseIndex)
		}
		l := getLock(t, leader, name, "")
		if !l.Held || l.Session != sessions[i] || l.Token != g.Token || l.Waiters != len(sessions)-i-1 {
			t.Fatalf("lock after grant %d: %+v", i, l)
		}
		prev, prevSession = g.Token, sessions[i]
	}
}

func TestWaitElapses(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	h, w := session(t, leader), session(t, leader)
	gh := mustAcquire(t, leader, name, h, nil)

	start := time.Now()
	ans := goDo(t.Context(), http.MethodPost, followers[0]+"/v1/locks/"+name+"/acquire", acquireReq(w, "1500ms", nil))
	waitWaiters(t, leader, name, 1)
	r := await(t, ans, "waiter")
	if elapsed := time.Since(start); elapsed < 1500*time.Millisecond {
		t.Fatalf("wait of 1.5s answered after %v", elapsed)
	}
	eb := apiError(t, r, http.StatusConflict, api.CodeLockHeld, "holder")
	if *eb.Holder != (api.Holder{Session: h, Token: gh.Token}) {
		t.Fatalf("holder %+v", eb.Holder)
	}
	// The queue entry is gone: a release leaves the lock free.
	if l := getLock(t, leader, name, ""); l.Waiters != 0 {
		t.Fatalf("waiters %d after the wait elapsed", l.Waiters)
	}
	release(t, leader, name, h, gh.Token)
	if l := getLock(t, leader, name, ""); l.Held {
		t.Fatalf("a waiter whose wait elapsed was granted: %+v", l)
	}
}

func TestWaiterSessionDestroyed(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	h, w := session(t, leader), session(t, leader)
	mustAcquire(t, leader, name, h, nil)

	ans := goDo(t.Context(), http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", acquireReq(w, "60s", nil))
	waitWaiters(t, leader, name, 1)
	start := time.Now()
	ok(t, do(t, http.MethodDelete, followers[0]+"/v1/sessions/"+w, nil), http.StatusOK, nil)
	apiError(t, await(t, ans, "waiter"), http.StatusNotFound, api.CodeSessionNotFound)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("the waiter was answered %v after its session ended", elapsed)
	}
	if l := getLock(t, leader, name, ""); l.Waiters != 0 || l.Session != h {
		t.Fatalf("lock %+v", l)
	}
}

func TestWaiterDisconnectLeavesQueue(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	for _, ep := range []string{leader, followers[0]} {
		name := lockName(t)
		h, w := session(t, leader), session(t, leader)
		gh := mustAcquire(t, leader, name, h, nil)
		ctx, cancel := context.WithCancel(t.Context())
		ans := goDo(ctx, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(w, "60s", nil))
		waitWaiters(t, leader, name, 1)
		cancel()
		<-ans
		waitWaiters(t, leader, name, 0)
		release(t, leader, name, h, gh.Token)
		if l := getLock(t, leader, name, ""); l.Held {
			t.Fatalf("a disconnected waiter was granted: %+v", l)
		}
	}
}

func TestQueuedSessionKeepsItsPlace(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	h, a, b := session(t, leader), session(t, leader), session(t, leader)
	gh := mustAcquire(t, leader, name, h, nil)
	first := goDo(t.Context(), http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(a, "30s", nil))
	waitWaiters(t, leader, name, 1)
	second := goDo(t.Context(), http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(b, "30s", nil))
	waitWaiters(t, leader, name, 2)
	// a asks again (as after a cut-off request): it keeps its place, no second entry. Should
	// another test's entry be the one askAgain sees, the release below may beat the repeat,
	// which then reads as an idempotent re-acquire: every assertion below holds in both orders.
	again := askAgain(t, leader, followers[0], name, a)
	if l := getLock(t, leader, name, ""); l.Waiters != 2 {
		t.Fatalf("waiters %d after a queued session asked again", l.Waiters)
	}

	release(t, leader, name, h, gh.Token)
	var g1, g2 api.AcquireResponse
	ok(t, await(t, first, "a's first request"), http.StatusOK, &g1)
	ok(t, await(t, again, "a's second request"), http.StatusOK, &g2)
	if g1.Session != a || g1.Token <= gh.Token || g2 != g1 {
		t.Fatalf("a's grants %+v and %+v", g1, g2)
	}
	pending(t, second, "b")
	if l := getLock(t, leader, name, ""); l.Session != a || l.Waiters != 1 {
		t.Fatalf("after a's grant: %+v, want b alone in the queue", l)
	}
	release(t, leader, name, a, g1.Token)
	var gb api.AcquireResponse
	ok(t, await(t, second, "b"), http.StatusOK, &gb)
	if gb.Session != b || gb.Token <= g1.Token {
		t.Fatalf("b's grant %+v after a's %+v", gb, g1)
	}
}

func TestCancelAcquire(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	h, w := session(t, leader), session(t, leader)
	gh := mustAcquire(t, leader, name, h, nil)
	cancelAt := func(ep, session string) string {
		return ep + "/v1/locks/" + name + "/acquire?session=" + session
	}

	// The entry of a session whose request still waits goes at once (here through a
	// follower), so that the release below grants nobody.
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	waiting := goDo(ctx, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(w, "30s", nil))
	waitWaiters(t, leader, name, 1)
	var got api.CancelAcquireResponse
	r := do(t, http.MethodDelete, cancelAt(followers[0], w), nil)
	ok(t, r, http.StatusOK, &got)
	hasKeys(t, fields(t, r.body), "cancelled", "held")
	if got != (api.CancelAcquireResponse{Cancelled: true}) {
		t.Fatalf("cancel of a queued session answered %s", r.body)
	}
	if l := getLock(t, leader, name, ""); l.Waiters != 0 {
		t.Fatalf("after the cancel: %+v", l)
	}
	release(t, leader, name, h, gh.Token)
	if l := getLock(t, leader, name, ""); l.Held {
		t.Fatalf("the release granted the lock to a session whose wait was cancelled: %+v", l)
	}
	stop()
	<-waiting

	// Nothing left to cancel.
	ok(t, do(t, http.MethodDelete, cancelAt(leader, w), nil), http.StatusOK, &got)
	if got != (api.CancelAcquireResponse{}) {
		t.Fatalf("cancel with nothing queued: %+v", got)
	}
	// A grant that came first is reported, and stays.
	gw := mustAcquire(t, leader, name, w, nil)
	ok(t, do(t, http.MethodDelete, cancelAt(followers[1], w), nil), http.StatusOK, &got)
	if got != (api.CancelAcquireResponse{Held: true, Token: gw.Token}) {
		t.Fatalf("cancel by the holder answered %+v, want held under %d", got, gw.Token)
	}
	if l := getLock(t, leader, name, ""); !l.Held || l.Session != w || l.Token != gw.Token {
		t.Fatalf("a cancel undid a grant: %+v", l)
	}

	apiError(t, do(t, http.MethodDelete, leader+"/v1/locks/"+name+"/acquire", nil), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodDelete, cancelAt(leader, w), `{"session":"`+w+`"}`), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodDelete, cancelAt(leader, strings.Repeat("ab", 16)), nil), http.StatusNotFound, api.CodeSessionNotFound)
	apiError(t, do(t, http.MethodDelete, cancelAt(leader, "not-an-id"), nil), http.StatusNotFound, api.CodeSessionNotFound)
}

// A cancel that names an attempt makes that attempt's later requests fail with 409
// attempt_cancelled, whether they would grant or queue, and leaves other attempts alone.
func TestCancelledAttemptIsRefused(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	h, w := session(t, leader), session(t, leader)
	acquireURL := func(ep string) string { return ep + "/v1/locks/" + name + "/acquire" }
	try := func(session, wait, attempt string) api.AcquireRequest {
		r := acquireReq(session, wait, nil)
		r.Attempt = attempt
		return r
	}
	cancel := func(ep, session, attempt string) api.CancelAcquireResponse {
		var got api.CancelAcquireResponse
		ok(t, do(t, http.MethodDelete, acquireURL(ep)+"?session="+session+"&attempt="+attempt, nil), http.StatusOK, &got)
		return got
	}

	// The try was given up before its request arrived; the lock is free when it does.
	if got := cancel(followers[0], w, "w-1"); got != (api.CancelAcquireResponse{}) {
		t.Fatalf("cancel before the request answered %+v", got)
	}
	apiError(t, do(t, http.MethodPost, acquireURL(followers[1]), try(w, "", "w-1")), http.StatusConflict, api.CodeAttemptCancelled)
	apiError(t, do(t, http.MethodPost, acquireURL(leader), try(w, "30s", "w-1")), http.StatusConflict, api.CodeAttemptCancelled)
	if l := getLock(t, leader, name, ""); l.Held || l.Waiters != 0 {
		t.Fatalf("a cancelled attempt changed the lock: %+v", l)
	}

	// Queued, then cancelled: the next request of that try does not rejoin the queue.
	gh := mustAcquire(t, leader, name, h, nil)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	waiting := goDo(ctx, http.MethodPost, acquireURL(leader), try(w, "30s", "w-2"))
	waitWaiters(t, leader, name, 1)
	if got := cancel(leader, w, "w-2"); got != (api.CancelAcquireResponse{Cancelled: true}) {
		t.Fatalf("cancel of a queued try answered %+v", got)
	}
	apiError(t, do(t, http.MethodPost, acquireURL(followers[0]), try(w, "30s", "w-2")), http.StatusConflict, api.CodeAttemptCancelled)
	release(t, leader, name, h, gh.Token)
	if l := getLock(t, leader, name, ""); l.Held {
		t.Fatalf("the release granted the lock to a cancelled try: %+v", l)
	}
	stop()
	<-waiting

	// A new try of the same session is granted.
	var g api.AcquireResponse
	ok(t, do(t, http.MethodPost, acquireURL(leader), try(w, "", "w-3")), http.StatusOK, &g)
	if g.Session != w {
		t.Fatalf("a new try answered %+v", g)
	}
	// Released with its attempt: a request of that try still on its way neither grants nor
	// queues, so the session cannot end up holding a lock it believes free.
	ok(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/release",
		api.ReleaseRequest{Session: w, Token: &g.Token, Attempt: "w-3"}), http.StatusOK, nil)
	apiError(t, do(t, http.MethodPost, acquireURL(followers[0]), try(w, "", "w-3")), http.StatusConflict, api.CodeAttemptCancelled)
	apiError(t, do(t, http.MethodPost, acquireURL(leader), try(w, "30s", "w-3")), http.StatusConflict, api.CodeAttemptCancelled)
	if l := getLock(t, leader, name, ""); l.Held || l.Waiters != 0 {
		t.Fatalf("a request of a released try changed the lock: %+v", l)
	}

	for _, bad := range []string{strings.Repeat("a", 65), "a b", "a/b", "é"} {
		apiError(t, do(t, http.MethodPost, acquireURL(leader), try(h, "", bad)), http.StatusBadRequest, api.CodeInvalidArgument)
		apiError(t, do(t, http.MethodDelete, acquireURL(leader)+"?session="+h+"&attempt="+url.QueryEscape(bad), nil),
			http.StatusBadRequest, api.CodeInvalidArgument)
		apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/release",
			api.ReleaseRequest{Session: h, Token: &gh.Token, Attempt: bad}), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestBlockingQuery(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	s := session(t, leader)
	mustAcquire(t, leader, name, s, strp("one"))
	l := getLock(t, leader, name, "")

	// Through a follower: held until modify_index exceeds the given index.
	q := fmt.Sprintf("?index=%d&wait=30s", l.ModifyIndex)
	ans := goDo(t.Context(), http.MethodGet, followers[0]+"/v1/locks/"+name+q, nil)
	select {
	case r := <-ans:
		t.Fatalf("blocking query answered before any change: %d %s", r.status, r.body)
	case <-time.After(300 * time.Millisecond):
	}
	mustAcquire(t, leader, name, s, strp("two"))
	var changed api.Lock
	ok(t, await(t, ans, "blocking query"), http.StatusOK, &changed)
	if changed.ModifyIndex <= l.ModifyIndex || changed.Value != "two" || changed.Session != s {
		t.Fatalf("blocking query answered %+v, index was %d", changed, l.ModifyIndex)
	}

	// An index already passed answers at once.
	start := time.Now()
	got := getLock(t, leader, name, fmt.Sprintf("?index=%d&wait=30s", changed.ModifyIndex-1))
	if !reflect.DeepEqual(got, changed) || time.Since(start) > 5*time.Second {
		t.Fatalf("blocking query on a passed index = %+v after %v", got, time.Since(start))
	}

	// Nothing changes: it answers the current state when the wait elapses.
	for _, ep := range []string{leader, followers[1]} {
		start = time.Now()
		got = getLock(t, ep, name, fmt.Sprintf("?index=%d&wait=1s", changed.ModifyIndex))
		if elapsed := time.Since(start); elapsed < time.Second || !reflect.DeepEqual(got, changed) {
			t.Fatalf("blocking query via %s answered %+v after %v", ep, got, elapsed)
		}
	}
	// A release wakes it too: the lock reads free, with a larger modify_index.
	ans = goDo(t.Context(), http.MethodGet, followers[1]+"/v1/locks/"+name+fmt.Sprintf("?index=%d&wait=30s", changed.ModifyIndex), nil)
	release(t, leader, name, s, changed.Token)
	var freed api.Lock
	ok(t, await(t, ans, "blocking query"), http.StatusOK, &freed)
	if freed.Held || freed.Session != "" || freed.ModifyIndex <= changed.ModifyIndex {
		t.Fatalf("blocking query answered %+v after the release; index was %d", freed, changed.ModifyIndex)
	}

	for _, q := range []string{"?index=1&wait=11m", "?index=abc", "?index=1&wait=abc", "?index=-1"} {
		apiError(t, do(t, http.MethodGet, leader+"/v1/locks/"+name+q, nil), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestLockDelayAfterExpiry(t *testing.T) {
	t.Parallel()
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	name := lockName(t)
	s := createSession(t, leader, api.CreateSessionRequest{TTL: "2s", LockDelay: "4s"})
	mustAcquire(t, leader, name, s.ID, nil)
	other := session(t, leader)
	// The expiring session also waits for a lock held by other.
	awaited := lockName(t)
	ga := mustAcquire(t, leader, awaited, other, nil)
	waiting := goDo(t.Context(), http.MethodPost, followers[1]+"/v1/locks/"+awaited+"/acquire", acquireReq(s.ID, "60s", nil))
	waitWaiters(t, leader, awaited, 1)

	// Let the session expire: no renewals.
	eventually(t, "session expiry", func() string {
		r := do(t, http.MethodGet, followers[0]+"/v1/sessions/"+s.ID, nil)
		if r.status == http.StatusNotFound {
			apiError(t, r, http.StatusNotFound, api.CodeSessionNotFound)
			return ""
		}
		return fmt.Sprintf("status %d %s", r.status, r.body)
	})
	if l := getLock(t, leader, name, ""); l.Held {
		t.Fatalf("lock of an expired session still held: %+v", l)
	}
	// Its wait was answered when it expired, and its queue entry is gone.
	apiError(t, await(t, waiting, "the expired session's wait"), http.StatusNotFound, api.CodeSessionNotFound)
	if l := getLock(t, leader, awaited, ""); l.Waiters != 0 || l.Session != other || l.Token != ga.Token {
		t.Fatalf("lock awaited by the expired session: %+v", l)
	}
	r := do(t, http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", acquireReq(other, "", nil))
	eb := apiError(t, r, http.StatusConflict, api.CodeLockDelayed, "available_in")
	left, err := time.ParseDuration(eb.AvailableIn)
	if err != nil || left <= 0 || left > 4*time.Second {
		t.Fatalf("available_in %q (%v)", eb.AvailableIn, err)
	}

	// A wait that ends inside the delay is answered lock_delayed, and leaves no queue entry.
	r = do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(other, "300ms", nil))
	eb = apiError(t, r, http.StatusConflict, api.CodeLockDelayed, "available_in")
	if left2, err := time.ParseDuration(eb.AvailableIn); err != nil || left2 <= 0 || left2 >= left {
		t.Fatalf("available_in %q after a wait, first %v", eb.AvailableIn, left)
	}
	if l := getLock(t, leader, name, ""); l.Waiters != 0 || l.Held {
		t.Fatalf("lock after a wait that ended in the delay: %+v", l)
	}

	// Free but delayed, and not awaited: not listed.
	r = do(t, http.MethodGet, leader+"/v1/locks?prefix="+name, nil)
	ok(t, r, http.StatusOK, nil)
	if string(fields(t, r.body)["locks"]) != "[]" {
		t.Fatalf("a delayed lock nobody waits for is listed: %s", r.body)
	}

	// With wait, the acquire is queued and granted when the delay ends; meanwhile the lock is
	// free but awaited, so it is listed.
	start := time.Now()
	ans := goDo(t.Context(), http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(other, "30s", strp("after")))
	waitWaiters(t, leader, name, 1)
	var list api.LockList
	ok(t, do(t, http.MethodGet, leader+"/v1/locks?prefix="+name, nil), http.StatusOK, &list)
	if len(list.Locks) != 1 || list.Locks[0].Name != name || list.Locks[0].Held || list.Locks[0].Waiters != 1 {
		t.Fatalf("listing a delayed, awaited lock: %+v", list)
	}
	var g api.AcquireResponse
	ok(t, await(t, ans, "waiter"), http.StatusOK, &g)
	if g.Session != other || g.Value != "after" {
		t.Fatalf("grant after the delay %+v", g)
	}
	// (left was measured before start: allow for the time in between.)
	if elapsed := time.Since(start); elapsed < left/2 {
		t.Fatalf("granted %v into a delay of %v", elapsed, left)
	}
}

func TestNoLockDelayAfterDestroyOrRelease(t *testing.T) {
	d := sharedCluster(t)
	leader, _ := roles(t, d)
	other := session(t, leader)

	name := lockName(t)
	s := createSession(t, leader, api.CreateSessionRequest{TTL: "30s", LockDelay: "60s"})
	mustAcquire(t, leader, name, s.ID, nil)
	ok(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+s.ID, nil), http.StatusOK, nil)
	mustAcquire(t, leader, name, other, nil)

	name2 := lockName(t)
	s2 := createSession(t, leader, api.CreateSessionRequest{TTL: "30s", LockDelay: "60s"})
	g := mustAcquire(t, leader, name2, s2.ID, nil)
	release(t, leader, name2, s2.ID, g.Token)
	mustAcquire(t, leader, name2, other, nil)
}

func TestAcquireWaitBounds(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[0]
	s := session(t, ep)
	name := lockName(t)
	for _, wait := range []string{"11m", "10m1s", "-1s", "abc", "5"} {
		apiError(t, do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s, wait, nil)), http.StatusBadRequest, api.CodeInvalidArgument)
	}
	// 10m is allowed; on a free lock it is granted at once.
	var g api.AcquireResponse
	ok(t, do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s, "10m", nil)), http.StatusOK, &g)
	if g.Session != s {
		t.Fatalf("grant %+v", g)
	}
	for _, q := range []string{"?index=1&wait=10m1s", "?wait=11m"} {
		apiError(t, do(t, http.MethodGet, ep+"/v1/locks/"+name+q, nil), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestRenewalsKeepSessionAlive(t *testing.T) {
	t.Parallel()
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := createSession(t, leader, api.CreateSessionRequest{TTL: "2s"})
	name := lockName(t)
	g := mustAcquire(t, leader, name, s.ID, nil)
	// Renew well within the TTL, through every node in turn, for twice the TTL.
	eps := append([]string{leader}, followers...)
	tick := time.NewTicker(400 * time.Millisecond)
	defer tick.Stop()
	for i, end := 0, time.Now().Add(4*time.Second); time.Now().Before(end); i++ {
		<-tick.C
		ok(t, do(t, http.MethodPut, eps[i%len(eps)]+"/v1/sessions/"+s.ID+"/renew", nil), http.StatusOK, nil)
	}
	if l := getLock(t, leader, name, ""); !l.Held || l.Session != s.ID || l.Token != g.Token {
		t.Fatalf("lock of a renewed session after twice its TTL: %+v", l)
	}
	// Once renewals stop, it expires and its lock is freed.
	eventually(t, "session expiry", func() string {
		if r := do(t, http.MethodGet, followers[0]+"/v1/sessions/"+s.ID, nil); r.status != http.StatusNotFound {
			return fmt.Sprintf("status %d", r.status)
		}
		return ""
	})
	if l := getLock(t, followers[1], name, ""); l.Held {
		t.Fatalf("lock of an expired session: %+v", l)
	}
	apiError(t, do(t, http.MethodPut, leader+"/v1/sessions/"+s.ID+"/renew", nil), http.StatusNotFound, api.CodeSessionNotFound)
}
