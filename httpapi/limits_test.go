package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/httpapi"
)

// TestRateLimit floods one node with acquires from one client: beyond the rate and its burst
// they are answered 429 with Retry-After, and none of the refused ones was applied, while reads
// are never limited.
func TestRateLimit(t *testing.T) {
	const perSecond = 1.0 // burst 2
	d := ownCluster(t, func(c *config.Config) { c.RateLimit = perSecond })
	li, _ := d.WaitLeader(t.Context())
	// Two followers: the leader's budget for 127.0.0.1 went on the other nodes' joins.
	ep, other := d.Endpoints()[(li+1)%3], d.Endpoints()[(li+2)%3]
	s := session(t, ep) // spends one request of the burst

	start := time.Now()
	var granted, refused []string
	for i := range 20 {
		name := fmt.Sprintf("t/ratelimit/%d", i)
		r := do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s, "", nil))
		switch r.status {
		case http.StatusOK:
			granted = append(granted, name)
		case http.StatusTooManyRequests:
			apiError(t, r, http.StatusTooManyRequests, api.CodeTooManyRequests)
			if got := r.header.Get("Retry-After"); got != "1" {
				t.Fatalf("Retry-After %q, want whole seconds (1)", got)
			}
			refused = append(refused, name)
		default:
			t.Fatalf("acquire %s: status %d: %s", name, r.status, short(r.body))
		}
	}
	elapsed := time.Since(start)
	if len(refused) == 0 {
		t.Fatalf("20 acquires in %v at %g/s: none refused", elapsed, perSecond)
	}
	if most := 2 + int(elapsed.Seconds()*perSecond) + 1; len(granted) > most {
		t.Errorf("%d acquires granted in %v; the limit allows at most %d", len(granted), elapsed, most)
	}
	for _, name := range refused {
		if l := getLock(t, ep, name, ""); l.Held {
			t.Errorf("refused acquire of %s was applied: %+v", name, l)
		}
	}
	for _, name := range granted {
		if l := getLock(t, ep, name, ""); !l.Held || l.Session != s {
			t.Errorf("granted %s reads as %+v", name, l)
		}
	}
	// Another node keeps its own budget: a client over the limit on one node is not refused by
	// the others.
	ok(t, do(t, http.MethodPost, other+"/v1/locks/t/ratelimit/other/acquire", acquireReq(s, "", nil)), http.StatusOK, nil)
}

// TestAuditLog checks that the node that receives a state-changing request writes one JSON
// line for it, with the status the client got, and that reads, forwarded copies, request
// bodies and lock values never reach the file.
func TestAuditLog(t *testing.T) {
	dir := t.TempDir()
	path := func(id string) string { return filepath.Join(dir, id+".audit") }
	d := ownCluster(t, func(c *config.Config) { c.AuditLog = path(c.ID) })
	li, _ := d.WaitLeader(t.Context())
	fi := (li + 1) % d.Size()
	follower, leaderID := d.Endpoints()[fi], d.Agent(li).Node().ID()
	followerID := d.Agent(fi).Node().ID()

	const value = "value-that-must-not-be-logged"
	s := session(t, follower)
	name := lockName(t) + "/jobs/nightly"
	var g api.AcquireResponse
	ok(t, do(t, http.MethodPost, follower+"/v1/locks/"+strings.ReplaceAll(name, "/", "%2F")+"/acquire", acquireReq(s, "", strp(value))), http.StatusOK, &g)
	getLock(t, follower, name, "")
	var zero uint64
	apiError(t, do(t, http.MethodPost, follower+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: s, Token: &zero}), http.StatusConflict, api.CodeNotHolder)
	release(t, follower, name, s, g.Token)
	// An operator's actions on a stuck holder are writes like any other: a forced release and
	// a destroy.
	g = mustAcquire(t, follower, name, s, nil)
	ok(t, do(t, http.MethodPost, follower+"/v1/locks/"+name+"/release", api.ReleaseRequest{Token: &g.Token, Force: true}), http.StatusOK, nil)
	s2 := session(t, follower)
	ok(t, do(t, http.MethodDelete, follower+"/v1/sessions/"+s2, nil), http.StatusOK, nil)

	var got []httpapi.AuditEntry
	eventually(t, "eight audit entries on the follower", func() string {
		got = readAudit(t, path(followerID))
		if len(got) < 8 {
			return fmt.Sprintf("%d entries: %+v", len(got), got)
		}
		return ""
	})
	want := []struct {
		method, lock string
		status       int
	}{
		{http.MethodPost, "", http.StatusCreated},
		{http.MethodPost, name, http.StatusOK},
		{http.MethodPost, name, http.StatusConflict},
		{http.MethodPost, name, http.StatusOK},
		{http.MethodPost, name, http.StatusOK},
		{http.MethodPost, name, http.StatusOK}, // the forced release
		{http.MethodPost, "", http.StatusCreated},
		{http.MethodDelete, "", http.StatusOK}, // the destroy
	}
	if len(got) != len(want) {
		t.Fatalf("follower's audit log has %d entries, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		e := got[i]
		if e.Method != w.method || e.Lock != w.lock || e.Status != w.status || e.Node != followerID ||
			e.Remote != "127.0.0.1" || e.AccessorID != "" || !strings.HasPrefix(e.Path, "/v1/") {
			t.Errorf("entry %d = %+v, want %s lock %q status %d from node %s", i, e, w.method, w.lock, w.status, followerID)
		}
		if _, err := time.Parse(time.RFC3339, e.Time); err != nil || !strings.HasSuffix(e.Time, "Z") {
			t.Errorf("entry %d time %q is not RFC 3339 UTC", i, e.Time)
		}
	}
	// (The dev cluster's nodes joined through the leader's POST /v1/cluster/members, which it
	// logged as the node that received them.)
	for _, e := range readAudit(t, path(leaderID)) {
		if e.Path != "/v1/cluster/members" {
			t.Errorf("the leader logged a request it only received forwarded: %+v", e)
		}
	}
	for i := range d.Size() {
		id := d.Agent(i).Node().ID()
		b, err := os.ReadFile(path(id))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), value) {
			t.Errorf("%s's audit log holds a request body", id)
		}
	}
}

// readAudit parses an audit log; a missing file has no entries.
func readAudit(t *testing.T, path string) []httpapi.AuditEntry {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []httpapi.AuditEntry
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e httpapi.AuditEntry
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}
