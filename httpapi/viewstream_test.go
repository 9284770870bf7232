package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/raftlock/raftlock/api"
)

// untilEvent reads events until ok holds for one of kind, or fails the test.
func untilEvent[T any](t *testing.T, st *sseStream, kind, what string, ok func(T) bool) T {
	t.Helper()
	for {
		e := st.next(t)
		if e.name != kind {
			t.Fatalf("%s: got a %q event %s", what, e.name, e.data)
		}
		var v T
		if err := json.Unmarshal(e.data, &v); err != nil {
			t.Fatalf("%s: event data %s: %v", what, e.data, err)
		}
		if ok(v) {
			return v
		}
	}
}

func findSession(l api.SessionList, id string) *api.SessionInfo {
	for i := range l.Sessions {
		if l.Sessions[i].ID == id {
			return &l.Sessions[i]
		}
	}
	return nil
}

// The sessions' stream, asked of a follower, is the leader's (time left and last renewal
// included), streamed back: a session created, renewed, holding a lock and destroyed shows in
// the events that follow, each a whole list as GET /v1/sessions answers it.
func TestSessionsStreamShowsEachChange(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	events := openStream(t, http.MethodGet, followers[0]+"/v1/sessions", nil, nil)
	first := events.next(t)
	var l api.SessionList
	if err := json.Unmarshal(first.data, &l); first.name != "sessions" || err != nil || first.id == "" {
		t.Fatalf("the first event is %s; want the sessions with an id (%v)", first, err)
	}

	id := createSession(t, leader, api.CreateSessionRequest{TTL: "30s", Name: "streamed"}).ID
	untilEvent(t, events, "sessions", "the new session", func(l api.SessionList) bool {
		s := findSession(l, id)
		return s != nil && s.Name == "streamed" && s.ExpiresIn != ""
	})
	ok(t, do(t, http.MethodPut, leader+"/v1/sessions/"+id+"/renew", nil), http.StatusOK, nil)
	untilEvent(t, events, "sessions", "the renewal", func(l api.SessionList) bool {
		s := findSession(l, id)
		return s != nil && s.LastRenewal != ""
	})
	name := lockName(t)
	mustAcquire(t, leader, name, id, nil)
	untilEvent(t, events, "sessions", "the lock held", func(l api.SessionList) bool {
		s := findSession(l, id)
		return s != nil && len(s.Locks) == 1 && s.Locks[0] == name
	})
	ok(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+id, nil), http.StatusOK, nil)
	untilEvent(t, events, "sessions", "the session gone", func(l api.SessionList) bool { return findSession(l, id) == nil })
}

// The cluster's stream: a stale one, on a follower, shows a new leader; a linearizable one,
// on the leader, ends with an end event (no_leader) when that node stops leading, rather than
// go on showing what a deposed leader knows.
func TestClusterStreamFollowsTheLeader(t *testing.T) {
	d := ownCluster(t, nil)
	leader, followers := roles(t, d)
	onLeader := openStream(t, http.MethodGet, leader+"/v1/cluster", nil, nil)
	stale := openStream(t, http.MethodGet, followers[0]+"/v1/cluster?consistency=stale&stream=1", nil, nil)
	var before api.Cluster
	before = untilEvent(t, onLeader, "cluster", "the leader's view", func(c api.Cluster) bool { return len(c.Members) == 3 })
	untilEvent(t, stale, "cluster", "the follower's view", func(c api.Cluster) bool { return c.Leader == before.Leader })

	var tr api.TransferResponse
	ok(t, do(t, http.MethodPost, leader+"/v1/cluster/leadership-transfer", nil), http.StatusOK, &tr)
	untilEvent(t, stale, "cluster", "the new leader, on the follower's stream", func(c api.Cluster) bool {
		return c.Leader != "" && c.Leader != before.Leader
	})
	evs := onLeader.ended(t)
	for len(evs) > 0 && evs[0].name == "cluster" {
		evs = evs[1:] // views from before it stepped down
	}
	if len(evs) != 1 || evs[0].name != api.EventEnd || endError(t, evs[0]).Error.Code != api.CodeNoLeader {
		t.Fatalf("the deposed leader's stream ended with %v; want one end event, no_leader, last", evs)
	}
}

// Under ACL a stream is judged by its token at every event: a token without operator:read
// sees its own sessions only, and the stream ends (an end event, 401) once the token is
// deleted; a token without operator:read cannot open the cluster's stream at all.
func TestViewStreamsFollowTheToken(t *testing.T) {
	eps := aclCluster(t)
	tok := newToken(t, eps[0], newPolicy(t, eps[0], "", rule(uniqueName(t)+"/", api.AccessWrite)))
	if r := doAs(t, tok.SecretID, http.MethodGet, eps[1]+"/v1/cluster", nil); r.status != http.StatusForbidden {
		t.Fatalf("GET /v1/cluster without operator:read answered %d", r.status)
	}
	if st, r := tryStream(t, http.MethodGet, eps[1]+"/v1/cluster", nil, as(tok.SecretID)); st != nil || r.status != http.StatusForbidden {
		t.Fatalf("the cluster's stream without operator:read answered %d %s; want 403", r.status, short(r.body))
	}

	events := openStream(t, http.MethodGet, eps[1]+"/v1/sessions", nil, as(tok.SecretID))
	other := sessionAs(t, eps[0], aclRoot)
	own := sessionAs(t, eps[0], tok.SecretID)
	l := untilEvent(t, events, "sessions", "its own session", func(l api.SessionList) bool { return findSession(l, own) != nil })
	if findSession(l, other) != nil {
		t.Fatalf("a token without operator:read was shown another token's session: %+v", l)
	}
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[0]+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusOK, nil)
	evs := events.ended(t)
	for len(evs) > 0 && evs[0].name == "sessions" {
		evs = evs[1:]
	}
	if len(evs) != 1 || evs[0].name != api.EventEnd || endError(t, evs[0]).Error.Code != api.CodeUnauthorized {
		t.Fatalf("after its token's deletion the stream ended with %v; want one end event, unauthorized, last", evs)
	}
}
