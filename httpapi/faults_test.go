package httpapi_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

func TestNoLeaderWhenMajorityDown(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, nil)
	li, err := d.WaitLeader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	survivor := (li + 1) % d.Size()
	ep := d.Endpoints()[survivor]
	s := session(t, ep)
	name := lockName(t)
	g := mustAcquire(t, ep, name, s, nil)
	eventually(t, "the survivor applies the grant", func() string {
		if l := getLock(t, ep, name, "?consistency=stale"); l.Token != g.Token {
			return "not yet"
		}
		return ""
	})

	// Kill the leader and the other follower: the survivor cannot reach a majority.
	for i := range d.Size() {
		if i != survivor {
			if err := d.Kill(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "the survivor reports not ready", func() string {
		r := do(t, http.MethodGet, ep+"/v1/ready", nil)
		if r.status != http.StatusServiceUnavailable {
			return strconv.Itoa(r.status)
		}
		return ""
	})
	// Each request waits for a leader a while before giving up; send them together.
	reqs := []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/sessions", api.CreateSessionRequest{TTL: "10s"}},
		{"POST", "/v1/locks/" + lockName(t) + "/acquire", acquireReq(s, "", nil)},
		{"POST", "/v1/locks/" + name + "/release", api.ReleaseRequest{Session: s, Token: &g.Token}},
		{"PUT", "/v1/sessions/" + s + "/renew", nil},
		{"GET", "/v1/locks/" + name, nil}, // linearizable reads need the leader too
	}
	answers := make([]<-chan response, len(reqs))
	for i, c := range reqs {
		answers[i] = goDo(t.Context(), c.method, ep+c.path, c.body)
	}
	for i, c := range reqs {
		r := await(t, answers[i], c.method+" "+c.path)
		apiError(t, r, http.StatusServiceUnavailable, api.CodeNoLeader)
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("%s %s: Retry-After %q", c.method, c.path, r.header.Get("Retry-After"))
		}
	}
	// The node still serves what needs no leader.
	ok(t, do(t, http.MethodGet, ep+"/v1/health", nil), http.StatusOK, nil)
	if l := getLock(t, ep, name, "?consistency=stale"); !l.Held || l.Token != g.Token || l.Session != s {
		t.Fatalf("stale read without a leader: %+v", l)
	}
}

func TestTooManySessions(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, func(c *config.Config) { c.MaxSessions = 2 })
	leader, followers := roles(t, d)
	s1 := session(t, leader)
	session(t, followers[0])
	for _, ep := range []string{leader, followers[0]} {
		for _, c := range []struct{ path, body string }{
			{"/v1/sessions", `{"ttl":"10s"}`},
			{"/v1/locks/" + lockName(t) + "/acquire", `{"ttl":"10s"}`}, // would create a session
		} {
			r := do(t, http.MethodPost, ep+c.path, c.body)
			apiError(t, r, http.StatusTooManyRequests, api.CodeTooManyRequests)
			if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
				t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
			}
		}
	}
	var list api.SessionList
	ok(t, do(t, http.MethodGet, leader+"/v1/sessions", nil), http.StatusOK, &list)
	if len(list.Sessions) != 2 {
		t.Fatalf("%d sessions after refusals, want 2", len(list.Sessions))
	}
	// Existing sessions work as before; ending one makes room.
	mustAcquire(t, leader, lockName(t), s1, nil)
	ok(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+s1, nil), http.StatusOK, nil)
	session(t, followers[1])
}

func TestTooManyWaiters(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, func(c *config.Config) { c.MaxWaitersPerLock = 1 })
	leader, followers := roles(t, d)
	h, w1, w2 := session(t, leader), session(t, leader), session(t, leader)
	name := lockName(t)
	gh := mustAcquire(t, leader, name, h, nil)
	first := goDo(t.Context(), http.MethodPost, followers[0]+"/v1/locks/"+name+"/acquire", acquireReq(w1, "30s", nil))
	waitWaiters(t, leader, name, 1)

	// The queue is full: another session may not wait ...
	r := do(t, http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", acquireReq(w2, "30s", nil))
	apiError(t, r, http.StatusTooManyRequests, api.CodeTooManyRequests)
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	// ... but may still try without waiting.
	apiError(t, do(t, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(w2, "", nil)), http.StatusConflict, api.CodeLockHeld, "holder")

	// Neither the holder nor the queued session take a new place by asking again, so the limit
	// does not refuse them: the holder gets its grant back at once ...
	var gh2 api.AcquireResponse
	ok(t, do(t, http.MethodPost, followers[1]+"/v1/locks/"+name+"/acquire", acquireReq(h, "30s", nil)), http.StatusOK, &gh2)
	if gh2.Token != gh.Token || gh2.Session != h {
		t.Fatalf("holder's re-acquire with wait: %+v, first grant %+v", gh2, gh)
	}
	// ... and the queued session keeps its place (as a client whose request was cut off does).
	again := askAgain(t, leader, leader, name, w1)
	if l := getLock(t, leader, name, ""); l.Waiters != 1 {
		t.Fatalf("waiters %d", l.Waiters)
	}
	release(t, leader, name, h, gh.Token)
	var g1, g2 api.AcquireResponse
	ok(t, await(t, first, "w1's first request"), http.StatusOK, &g1)
	ok(t, await(t, again, "w1's repeated request"), http.StatusOK, &g2)
	if g1.Session != w1 || g2 != g1 {
		t.Fatalf("grants %+v and %+v", g1, g2)
	}
}

// A linearizable blocking query confirms the leadership again after its wait: the node that
// lost its majority while the query waited must not answer from a state that a newer leader
// may have moved on from.
func TestBlockingQueryConfirmsLeadershipAfterItsWait(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, nil)
	li, err := d.WaitLeader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ep := d.Endpoints()[li]
	name := lockName(t)
	l := getLock(t, ep, name, "")
	ch := goDo(t.Context(), http.MethodGet, ep+"/v1/locks/"+name+"?index="+strconv.FormatUint(max(l.ModifyIndex, 1), 10)+"&wait=3s", nil)
	eventually(t, "the query waits", func() string {
		r := do(t, http.MethodGet, ep+"/metrics", nil)
		if !strings.Contains(string(r.body), "\nraftlock_blocking_queries 1\n") {
			return "no blocking query waits yet"
		}
		return ""
	})
	for i := range d.Size() { // the leader loses its majority while the query waits
		if i != li {
			if err := d.Kill(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := await(t, ch, "the blocking query")
	apiError(t, r, http.StatusServiceUnavailable, api.CodeNoLeader)
}
