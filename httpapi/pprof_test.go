package httpapi_test

import (
	"bytes"
	"net/http"
	"os"
	"strings"
	"testing"
)

// Without --enable-pprof there is nothing under /debug/pprof/.
func TestPprofIsOffByDefault(t *testing.T) {
	ep := sharedCluster(t).Endpoints()[0]
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		if r := do(t, http.MethodGet, ep+path, nil); r.status != http.StatusNotFound {
			t.Errorf("GET %s without --enable-pprof: %d %s; want 404", path, r.status, short(r.body))
		}
	}
}

// With --enable-pprof a node serves its own profiles; under ACL only to operator:read.
func TestPprofServesProfilesToOperators(t *testing.T) {
	eps := aclCluster(t)
	follower := eps[1] // a profile is of the node asked, so a follower answers it itself
	reader := newToken(t, eps[0], newPolicy(t, eps[0], "read")).SecretID
	worker := newToken(t, eps[0], newPolicy(t, eps[0], "none", rule("jobs/", "write"))).SecretID
	// Tokens are checked against the follower's own state: wait until it has applied both.
	// (A stale read would not tell: a node sends one with a token it does not know on to the
	// leader.)
	d := aclShared.Get(t)
	for _, secret := range []string{reader, worker} {
		eventually(t, "the follower knows a new token", func() string {
			for i, ep := range d.Endpoints() {
				if a := d.Agent(i); ep == follower && a != nil {
					if _, _, known := a.Node().ResolveToken(secret); known {
						return ""
					}
				}
			}
			return "not yet"
		})
	}

	refused(t, rawDo(http.MethodGet, follower+"/debug/pprof/heap", nil, nil), http.StatusUnauthorized, "token")
	refused(t, doAs(t, worker, http.MethodGet, follower+"/debug/pprof/heap", nil), http.StatusForbidden, "operator:read", worker)

	gzipped := func(path string) {
		t.Helper()
		r := doAs(t, reader, http.MethodGet, follower+path, nil)
		if r.status != http.StatusOK || !bytes.HasPrefix(r.body, []byte{0x1f, 0x8b}) {
			t.Fatalf("GET %s: %d %s; want 200 and a gzipped profile", path, r.status, short(r.body))
		}
	}
	gzipped("/debug/pprof/profile?seconds=1")
	gzipped("/debug/pprof/heap")

	for path, want := range map[string]string{
		"/debug/pprof/":                  "goroutine",
		"/debug/pprof/goroutine?debug=1": "goroutine profile:",
		"/debug/pprof/cmdline":           os.Args[0], // the nodes run in this test process
	} {
		r := doAs(t, reader, http.MethodGet, follower+path, nil)
		if r.status != http.StatusOK || !strings.Contains(string(r.body), want) {
			t.Errorf("GET %s: %d %s; want 200 and %q", path, r.status, short(r.body), want)
		}
	}
	if r := doAs(t, reader, http.MethodGet, follower+"/debug/pprof/no-such-profile", nil); r.status != http.StatusNotFound {
		t.Errorf("GET an unknown profile: %d %s; want 404", r.status, short(r.body))
	}
}
