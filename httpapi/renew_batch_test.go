package httpapi_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

func renewMany(t *testing.T, ep string, ids ...string) api.RenewSessionsResponse {
	t.Helper()
	var rr api.RenewSessionsResponse
	r := do(t, http.MethodPost, ep+"/v1/sessions/renew", api.RenewSessionsRequest{IDs: ids})
	ok(t, r, http.StatusOK, &rr)
	hasKeys(t, fields(t, r.body), "renewed", "not_found", "unknown")
	return rr
}

func TestRenewSessionsBatch(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	a := createSession(t, leader, api.CreateSessionRequest{TTL: "15s"})
	b := createSession(t, leader, api.CreateSessionRequest{TTL: "30s"})
	gone := createSession(t, leader, api.CreateSessionRequest{TTL: "30s"})
	ok(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+gone.ID, nil), http.StatusOK, nil)
	const malformed = "not-a-session"
	for _, ep := range []string{leader, followers[0]} {
		rr := renewMany(t, ep, a.ID, gone.ID, b.ID, malformed)
		want := []api.RenewResponse{{ID: a.ID, TTL: "15s"}, {ID: b.ID, TTL: "30s"}}
		if !slices.Equal(rr.Renewed, want) || !slices.Equal(sorted(rr.NotFound), sorted([]string{gone.ID, malformed})) || len(rr.Unknown) != 0 {
			t.Fatalf("batch renew via %s = %+v, want renewed %v and not found %s, %s", ep, rr, want, gone.ID, malformed)
		}
	}
	// Only unknown ids: nothing renewed, and the lists are empty arrays, never null.
	r := do(t, http.MethodPost, leader+"/v1/sessions/renew", api.RenewSessionsRequest{IDs: []string{gone.ID}})
	ok(t, r, http.StatusOK, nil)
	if !strings.Contains(string(r.body), `"renewed":[]`) || !strings.Contains(string(r.body), `"unknown":[]`) {
		t.Fatalf("empty lists are not [] in %s", r.body)
	}
	// A destroyed session stays gone: the batch never revived it.
	apiError(t, do(t, http.MethodGet, leader+"/v1/sessions/"+gone.ID, nil), http.StatusNotFound, api.CodeSessionNotFound)
}

func TestRenewSessionsValidation(t *testing.T) {
	leader, _ := roles(t, sharedCluster(t))
	s := session(t, leader)
	url := leader + "/v1/sessions/renew"
	tooMany := make([]string, 1001)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("%032x", i)
	}
	for _, body := range []any{nil, "{}", `{"ids":[]}`, `{"ids":"` + s + `"}`, `{"ids":["` + s + `"],"ttl":"5s"}`,
		`{"ids":["` + s + `","` + s + `"]}`, api.RenewSessionsRequest{IDs: tooMany}, `{"ids":[`} {
		apiError(t, do(t, http.MethodPost, url, body), http.StatusBadRequest, api.CodeInvalidArgument)
	}
	// The largest batch is accepted.
	rr := renewMany(t, leader, append(tooMany[:999], s)...)
	if len(rr.Renewed) != 1 || rr.Renewed[0].ID != s || len(rr.NotFound) != 999 {
		t.Fatalf("batch of 1000: renewed %v, %d not found", rr.Renewed, len(rr.NotFound))
	}
	apiError(t, do(t, http.MethodPut, url, `{"ids":["`+s+`"]}`), http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
}

// TestRenewSessionsKeepsAlive shows that a batch renewal restarts the lease: of two sessions
// with a 2s TTL, the one renewed in batches outlives the other by well over its TTL.
func TestRenewSessionsKeepsAlive(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	kept := createSession(t, leader, api.CreateSessionRequest{TTL: "2s"})
	left := createSession(t, leader, api.CreateSessionRequest{TTL: "2s"})
	leftGone := time.Time{}
	for i := 0; ; i++ {
		ep := followers[i%len(followers)]
		rr := renewMany(t, ep, kept.ID)
		if len(rr.Renewed) != 1 {
			t.Fatalf("renewal %d of the kept session via %s: %+v", i, ep, rr)
		}
		if leftGone.IsZero() && do(t, http.MethodGet, leader+"/v1/sessions/"+left.ID, nil).status == http.StatusNotFound {
			leftGone = time.Now()
		}
		if !leftGone.IsZero() && time.Since(leftGone) > 2500*time.Millisecond {
			break
		}
		if i > 200 {
			t.Fatal("the session that was not renewed never expired")
		}
		time.Sleep(500 * time.Millisecond) // the client's renewal period (TTL/4)
	}
	ok(t, do(t, http.MethodGet, leader+"/v1/sessions/"+kept.ID, nil), http.StatusOK, nil)
	if rr := renewMany(t, leader, left.ID); len(rr.NotFound) != 1 {
		t.Fatalf("the expired session was not reported not found: %+v", rr)
	}
}
