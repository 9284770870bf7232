package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testkit"
)

func TestCreateSessionShape(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[0]
	r := do(t, http.MethodPost, ep+"/v1/sessions", map[string]string{"ttl": "10s", "name": "worker-7", "lock_delay": "0s"})
	ok(t, r, http.StatusCreated, nil)
	hasKeys(t, fields(t, r.body), "id", "name", "ttl", "lock_delay", "created_index")
	var s api.Session
	if err := json.Unmarshal(r.body, &s); err != nil {
		t.Fatal(err)
	}
	if !hexID.MatchString(s.ID) {
		t.Fatalf("id %q is not 32 hex characters", s.ID)
	}
	if s.Name != "worker-7" || s.TTL != "10s" || s.LockDelay != "0s" {
		t.Fatalf("session %+v", s)
	}
	if s.CreatedIndex == 0 || s.CreatedIndex > indexHeader(t, r) {
		t.Fatalf("created_index %d, %s %d", s.CreatedIndex, api.HeaderIndex, indexHeader(t, r))
	}

	// name and lock_delay are optional; durations come back as Go duration strings.
	s2 := createSession(t, ep, api.CreateSessionRequest{TTL: "90s", LockDelay: "1500ms"})
	if s2.Name != "" || s2.TTL != "1m30s" || s2.LockDelay != "1.5s" {
		t.Fatalf("session %+v", s2)
	}
	s3 := createSession(t, ep, api.CreateSessionRequest{TTL: "2s"})
	if s3.LockDelay != "0s" || s3.TTL != "2s" {
		t.Fatalf("session %+v", s3)
	}
	if s2.ID == s.ID || s3.ID == s2.ID || s3.CreatedIndex <= s2.CreatedIndex {
		t.Fatalf("ids or created indexes not distinct: %+v %+v %+v", s, s2, s3)
	}
}

func TestSessionTTLBounds(t *testing.T) {
	ep := sharedCluster(t).Endpoints()[1]
	for _, ttl := range []string{"2s", "24h"} {
		createSession(t, ep, api.CreateSessionRequest{TTL: ttl})
	}
	for _, ttl := range []string{"1s", "1999ms", "25h", "24h0m1s", "abc", "10", "-5s", ""} {
		apiError(t, do(t, http.MethodPost, ep+"/v1/sessions", map[string]string{"ttl": ttl}), http.StatusBadRequest, api.CodeInvalidArgument)
	}
	apiError(t, do(t, http.MethodPost, ep+"/v1/sessions", map[string]any{"ttl": 10}), http.StatusBadRequest, api.CodeInvalidArgument)
	for _, delay := range []string{"0s", "60s"} {
		createSession(t, ep, api.CreateSessionRequest{TTL: "10s", LockDelay: delay})
	}
	for _, delay := range []string{"61s", "-1s", "1x"} {
		apiError(t, do(t, http.MethodPost, ep+"/v1/sessions", map[string]string{"ttl": "10s", "lock_delay": delay}), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

func TestGetSession(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := createSession(t, leader, api.CreateSessionRequest{TTL: "30s", Name: "getter", LockDelay: "2s"})
	a, b := lockName(t), lockName(t)
	mustAcquire(t, leader, a, s.ID, nil)
	mustAcquire(t, leader, b, s.ID, nil)

	for _, ep := range append([]string{leader}, followers...) {
		r := do(t, http.MethodGet, ep+"/v1/sessions/"+s.ID, nil)
		ok(t, r, http.StatusOK, nil)
		hasSessionKeys(t, r.body)
		var got api.SessionInfo
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Session != s || !slices.Equal(sorted(got.Locks), sorted([]string{a, b})) {
			t.Fatalf("GET session via %s = %+v, want %+v with locks %s %s", ep, got, s, a, b)
		}
	}

	// A session without locks lists them as an empty array, never null.
	s2 := session(t, leader)
	r := do(t, http.MethodGet, followers[0]+"/v1/sessions/"+s2, nil)
	ok(t, r, http.StatusOK, nil)
	if string(fields(t, r.body)["locks"]) != "[]" {
		t.Fatalf("locks of a session without locks: %s", r.body)
	}

	apiError(t, do(t, http.MethodGet, leader+"/v1/sessions/0123456789abcdef0123456789abcdef", nil), http.StatusNotFound, api.CodeSessionNotFound)
	apiError(t, do(t, http.MethodGet, leader+"/v1/sessions/not-a-session", nil), http.StatusNotFound, api.CodeSessionNotFound)
}

// hasSessionKeys checks the fields of a session as GET answers it: those every answer has, and
// the leader's view of its lease where the leader answered (see
// TestSessionShowsLeaseLeftAndLastRenewal).
func hasSessionKeys(t *testing.T, body []byte) {
	t.Helper()
	m := fields(t, body)
	delete(m, "expires_in")
	delete(m, "last_renewal")
	delete(m, "waiting") // a session of another test may be waiting
	hasKeys(t, m, "id", "name", "ttl", "lock_delay", "created_index", "locks")
}

func TestListSessions(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[2]
	s1 := createSession(t, ep, api.CreateSessionRequest{TTL: "30s", Name: "list-1"})
	s2 := createSession(t, ep, api.CreateSessionRequest{TTL: "20s", Name: "list-2", LockDelay: "5s"})
	name := lockName(t)
	mustAcquire(t, ep, name, s2.ID, nil)

	r := do(t, http.MethodGet, ep+"/v1/sessions", nil)
	ok(t, r, http.StatusOK, nil)
	hasKeys(t, fields(t, r.body), "sessions")
	var list api.SessionList
	if err := json.Unmarshal(r.body, &list); err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, raw := range rawList(t, r.body, "sessions") {
		hasSessionKeys(t, raw)
	}
	for _, s := range list.Sessions {
		switch s.ID {
		case s1.ID:
			found++
			if s.Session != s1 || len(s.Locks) != 0 {
				t.Fatalf("listed %+v, want %+v without locks", s, s1)
			}
		case s2.ID:
			found++
			if s.Session != s2 || !slices.Equal(s.Locks, []string{name}) {
				t.Fatalf("listed %+v, want %+v holding %s", s, s2, name)
			}
		}
	}
	if found != 2 {
		t.Fatalf("the list lacks the new sessions: %s", r.body)
	}
	// A destroyed session leaves the list.
	ok(t, do(t, http.MethodDelete, ep+"/v1/sessions/"+s1.ID, nil), http.StatusOK, nil)
	ok(t, do(t, http.MethodGet, ep+"/v1/sessions", nil), http.StatusOK, &list)
	for _, s := range list.Sessions {
		if s.ID == s1.ID {
			t.Fatalf("destroyed session %s still listed", s1.ID)
		}
	}
}

func TestRenewSession(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := createSession(t, leader, api.CreateSessionRequest{TTL: "15s"})
	for _, c := range []struct {
		ep   string
		body any
	}{{leader, nil}, {leader, "{}"}, {followers[0], nil}, {followers[1], "{}"}} {
		r := do(t, http.MethodPut, c.ep+"/v1/sessions/"+s.ID+"/renew", c.body)
		ok(t, r, http.StatusOK, nil)
		hasKeys(t, fields(t, r.body), "id", "ttl")
		var rr api.RenewResponse
		if err := json.Unmarshal(r.body, &rr); err != nil {
			t.Fatal(err)
		}
		if rr.ID != s.ID || rr.TTL != "15s" {
			t.Fatalf("renew via %s (body %v) = %s", c.ep, c.body, r.body)
		}
	}
	apiError(t, do(t, http.MethodPut, leader+"/v1/sessions/"+s.ID+"/renew", `{"ttl":"20s"}`), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodPut, leader+"/v1/sessions/"+s.ID+"/renew", `{`), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodPut, followers[0]+"/v1/sessions/0123456789abcdef0123456789abcdef/renew", nil), http.StatusNotFound, api.CodeSessionNotFound)

	// A destroyed session is never revived by a renewal.
	ok(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+s.ID, nil), http.StatusOK, nil)
	apiError(t, do(t, http.MethodPut, followers[0]+"/v1/sessions/"+s.ID+"/renew", nil), http.StatusNotFound, api.CodeSessionNotFound)
	apiError(t, do(t, http.MethodPut, leader+"/v1/sessions/"+s.ID+"/renew", "{}"), http.StatusNotFound, api.CodeSessionNotFound)
	apiError(t, do(t, http.MethodGet, leader+"/v1/sessions/"+s.ID, nil), http.StatusNotFound, api.CodeSessionNotFound)
}

func TestDestroySession(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := session(t, leader)
	a, b := lockName(t), lockName(t)
	mustAcquire(t, leader, a, s, nil)
	mustAcquire(t, leader, b, s, nil)

	r := do(t, http.MethodDelete, followers[1]+"/v1/sessions/"+s, nil)
	ok(t, r, http.StatusOK, nil)
	hasKeys(t, fields(t, r.body), "released")
	var dr api.DestroyResponse
	if err := json.Unmarshal(r.body, &dr); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(dr.Released), sorted([]string{a, b})) {
		t.Fatalf("released %v, want %s and %s", dr.Released, a, b)
	}
	for _, name := range []string{a, b} {
		if l := getLock(t, followers[0], name, ""); l.Held {
			t.Fatalf("lock %s still held after its session was destroyed: %+v", name, l)
		}
	}
	apiError(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+s, nil), http.StatusNotFound, api.CodeSessionNotFound)
	apiError(t, do(t, http.MethodDelete, leader+"/v1/sessions/not-hex", nil), http.StatusNotFound, api.CodeSessionNotFound)

	// A session without locks releases nothing: an empty array.
	r = do(t, http.MethodDelete, leader+"/v1/sessions/"+session(t, leader), nil)
	ok(t, r, http.StatusOK, nil)
	if string(fields(t, r.body)["released"]) != "[]" {
		t.Fatalf("destroying a session without locks: %s", r.body)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// rawList returns the elements of the array field of a JSON object.
func rawList(t *testing.T, body []byte, field string) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	if err := json.Unmarshal(fields(t, body)[field], &out); err != nil {
		t.Fatalf("field %s of %s: %v", field, body, err)
	}
	return out
}

// The leader's answer for a session says how long its lease has left and, once a renewal
// arrived, when; a follower's stale read, which knows neither, leaves both out.
func TestSessionShowsLeaseLeftAndLastRenewal(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := createSession(t, leader, api.CreateSessionRequest{TTL: "30s", Name: "lease"})
	read := func(ep, q string) api.SessionInfo {
		t.Helper()
		var one api.SessionInfo
		ok(t, do(t, http.MethodGet, ep+"/v1/sessions/"+s.ID+q, nil), http.StatusOK, &one)
		var list api.SessionList
		ok(t, do(t, http.MethodGet, ep+"/v1/sessions"+q, nil), http.StatusOK, &list)
		for _, l := range list.Sessions {
			if l.ID == s.ID && (l.ExpiresIn == "") != (one.ExpiresIn == "") {
				t.Fatalf("GET /v1/sessions%s and /v1/sessions/{id} disagree: %+v, %+v", q, l, one)
			}
		}
		return one
	}
	left := func(info api.SessionInfo) time.Duration {
		t.Helper()
		d, err := time.ParseDuration(info.ExpiresIn)
		if err != nil || d <= 0 || d > 30*time.Second {
			t.Fatalf("expires_in %q of a 30s session: %v", info.ExpiresIn, err)
		}
		return d
	}
	got := read(leader, "")
	left(got)
	if got.LastRenewal != "" {
		t.Fatalf("last_renewal %q of a session never renewed", got.LastRenewal)
	}
	before := time.Now()
	ok(t, do(t, http.MethodPut, leader+"/v1/sessions/"+s.ID+"/renew", nil), http.StatusOK, nil)
	got = read(followers[0], "") // forwarded to the leader
	left(got)
	at, err := time.Parse(time.RFC3339Nano, got.LastRenewal)
	if err != nil {
		t.Fatalf("last_renewal %q: %v", got.LastRenewal, err)
	}
	// The leader is in this process: its clock is the test's.
	if at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("last_renewal %v, renewed between %v and now", at, before)
	}
	// A stale read answers from what the follower has applied: wait until it has the session.
	testkit.Until(t, 10*time.Second, "the follower applies the session", func() error {
		if r := do(t, http.MethodGet, followers[0]+"/v1/sessions/"+s.ID+"?consistency=stale", nil); r.status != http.StatusOK {
			return fmt.Errorf("status %d", r.status)
		}
		return nil
	})
	if got := read(followers[0], "?consistency=stale"); got.ExpiresIn != "" || got.LastRenewal != "" {
		t.Fatalf("a follower's stale read says expires_in %q, last_renewal %q", got.ExpiresIn, got.LastRenewal)
	}
}
