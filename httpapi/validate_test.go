package httpapi_test

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
)

func TestLockNames(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[0]
	s := session(t, ep)

	long := "t/names/" + strings.Repeat("x", 256-len("t/names/"))
	for _, name := range []string{long, "A-Z_a.z:0/9", "t/names/acquired", "t/names/check/x", "release-me", "t/names/..."} {
		g := mustAcquire(t, ep, name, s, nil)
		if l := getLock(t, ep, name, ""); !l.Held || l.Token != g.Token {
			t.Fatalf("lock %q: %+v", name, l)
		}
		if c := checkLock(t, ep, name, g.Token); !c.Current {
			t.Fatalf("check of %q: %+v", name, c)
		}
		release(t, ep, name, s, g.Token)
	}

	bad := []string{
		long + "y",    // 257 bytes
		"t/a%20b",     // space
		"t/a*b",       // not in the alphabet
		"t/a%C3%A4b",  // non-ASCII
		"t/a,b",       // not in the alphabet
		"t/a%2Ab",     // escaped '*'
		"t/a@b",       // not in the alphabet
		"t/a%25b",     // '%'
		"t/x/acquire", // reserved last segments
		"t/x/release",
		"t/x/check",
		"acquire",
		"",
		// Empty, "." and ".." segments, plain or percent-encoded: refused, never normalised.
		"t//x",
		"/t/x",
		"t/x/",
		"./t",
		"t/.",
		"t/./x",
		"jobs/../db/x",
		"t/..",
		"..",
		"t%2F%2Fx",
		"t%2F..%2Fx",
		"t/%2E%2E/x",
		"t/%2e/x",
		"%2Ft",
	}
	var zero uint64
	for _, name := range bad {
		base := ep + "/v1/locks/" + name
		apiError(t, do(t, http.MethodPost, base+"/acquire", acquireReq(s, "", nil)), http.StatusBadRequest, api.CodeInvalidArgument)
		apiError(t, do(t, http.MethodPost, base+"/release", api.ReleaseRequest{Session: s, Token: &zero}), http.StatusBadRequest, api.CodeInvalidArgument)
		apiError(t, do(t, http.MethodGet, base+"/check?token=1", nil), http.StatusBadRequest, api.CodeInvalidArgument)
		apiError(t, do(t, http.MethodDelete, base+"/acquire?session="+s, nil), http.StatusBadRequest, api.CodeInvalidArgument)
		if last := name[strings.LastIndexByte(name, '/')+1:]; last != "" && !slices.Contains([]string{"acquire", "release", "check"}, last) {
			// (GET .../x/check is the check of x, GET .../x/acquire a wrong method.)
			apiError(t, do(t, http.MethodGet, base, nil), http.StatusBadRequest, api.CodeInvalidArgument)
		}
	}
	var info api.SessionInfo
	ok(t, do(t, http.MethodGet, ep+"/v1/sessions/"+s, nil), http.StatusOK, &info)
	if len(info.Locks) != 0 {
		t.Fatalf("refused names left locks behind: %v", info.Locks)
	}
}

func checkLock(t *testing.T, ep, name string, token uint64) api.CheckResponse {
	t.Helper()
	var c api.CheckResponse
	ok(t, do(t, http.MethodGet, ep+"/v1/locks/"+name+"/check?token="+strconv.FormatUint(token, 10), nil), http.StatusOK, &c)
	return c
}

func TestValueLimit(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[2]
	s := session(t, ep)
	name := lockName(t)
	max := strings.Repeat("v", 4096)
	g := mustAcquire(t, ep, name, s, &max)
	if g.Value != max {
		t.Fatalf("value of %d bytes came back as %d", len(max), len(g.Value))
	}
	apiError(t, do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s, "", strp(max+"v"))), http.StatusBadRequest, api.CodeInvalidArgument)
	apiError(t, do(t, http.MethodPost, ep+"/v1/locks/"+lockName(t)+"/acquire", acquireReq(s, "", strp(max+"v"))), http.StatusBadRequest, api.CodeInvalidArgument)
	if l := getLock(t, ep, name, ""); l.Value != max {
		t.Fatalf("a refused value replaced the stored one")
	}
}

func TestMalformedBodies(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[1]
	s := session(t, ep)
	name := lockName(t)
	cases := []struct{ method, path, body string }{
		// unknown fields
		{"POST", "/v1/sessions", `{"ttl":"10s","tll":"5s"}`},
		{"POST", "/v1/sessions", `{"ttl":"10s","Lock_Delay_":"1s"}`},
		{"POST", "/v1/locks/" + name + "/acquire", `{"session":"` + s + `","wiat":"1s"}`},
		{"POST", "/v1/locks/" + name + "/release", `{"session":"` + s + `","token":1,"forced":true}`},
		{"PUT", "/v1/sessions/" + s + "/renew", `{"ttl":"10s"}`},
		{"POST", "/v1/cluster/members", `{"id":"n9","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2","voter":true}`},
		{"POST", "/v1/cluster/leadership-transfer", `{"node":"n2"}`},
		// malformed JSON
		{"POST", "/v1/sessions", `{"ttl":"10s"`},
		{"POST", "/v1/sessions", `{ttl:"10s"}`},
		{"POST", "/v1/sessions", `["ttl","10s"]`},
		{"POST", "/v1/sessions", `"10s"`},
		{"POST", "/v1/sessions", `null x`},
		{"POST", "/v1/locks/" + name + "/acquire", `{"session":"` + s + `",}`},
		{"POST", "/v1/locks/" + name + "/acquire", `{"session":"` + s + `","value":7}`},
		{"POST", "/v1/locks/" + name + "/release", `{"session":"` + s + `","token":1.5}`},
		{"PUT", "/v1/sessions/" + s + "/renew", `{`},
		{"POST", "/v1/cluster/leadership-transfer", `{"id":`},
		// trailing data after the object
		{"POST", "/v1/sessions", `{"ttl":"10s"} x`},
		{"POST", "/v1/sessions", `{"ttl":"10s"}{}`},
		{"POST", "/v1/sessions", `{"ttl":"10s"} {"ttl":"10s"}`},
		{"POST", "/v1/locks/" + name + "/acquire", `{"session":"` + s + `"}]`},
		{"PUT", "/v1/sessions/" + s + "/renew", `{}{}`},
		// a required body missing
		{"POST", "/v1/sessions", ``},
		{"POST", "/v1/locks/" + name + "/acquire", `   `},
		{"POST", "/v1/cluster/members", ``},
	}
	for _, c := range cases {
		r := do(t, c.method, ep+c.path, c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s %s %s: status %d %s", c.method, c.path, c.body, r.status, r.body)
			continue
		}
		apiError(t, r, http.StatusBadRequest, api.CodeInvalidArgument)
	}
	// None of them took effect.
	if l := getLock(t, ep, name, ""); l.Held {
		t.Fatalf("a refused acquire took the lock: %+v", l)
	}
	// Whitespace around a valid object is fine.
	ok(t, do(t, http.MethodPost, ep+"/v1/sessions", " \n{\"ttl\":\"10s\"}\n "), http.StatusCreated, nil)
}

func TestBodyLimit(t *testing.T) {
	d := sharedCluster(t)
	_, followers := roles(t, d)
	ep := followers[0]
	// A body of exactly 64 KiB is accepted (here: a valid object padded with whitespace).
	obj := `{"ttl":"10s"}`
	exact := obj + strings.Repeat(" ", 64<<10-len(obj))
	ok(t, do(t, http.MethodPost, ep+"/v1/sessions", exact), http.StatusCreated, nil)

	over := exact + " "
	s := session(t, ep)
	big := `{"session":"` + s + `","value":"` + strings.Repeat("v", 70<<10) + `"}`
	for _, c := range []struct{ path, body string }{
		{"/v1/sessions", over},
		{"/v1/locks/" + lockName(t) + "/acquire", big},
		{"/v1/cluster/members", over},
	} {
		// With a Content-Length ...
		apiError(t, do(t, http.MethodPost, ep+c.path, c.body), http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
		// ... and chunked, without one.
		r := do(t, http.MethodPost, ep+c.path, struct{ io.Reader }{strings.NewReader(c.body)})
		apiError(t, r, http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
	}
	apiError(t, do(t, http.MethodPut, ep+"/v1/sessions/"+s+"/renew", over), http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
}

func TestUnknownRoute(t *testing.T) {
	d := sharedCluster(t)
	for _, ep := range d.Endpoints() {
		for _, c := range []struct{ method, path string }{
			{"GET", "/"},
			{"GET", "/v1"},
			{"GET", "/v1/"},
			{"GET", "/v1/nope"},
			{"POST", "/v1/nope"},
			{"GET", "/v2/sessions"},
			{"GET", "/v1/sessions/abc/def"},
			{"PUT", "/v1/sessions/abc/refresh"},
			{"GET", "/v1/cluster/nope"},
			{"GET", "/metrics/x"},
			{"GET", "/index.html"},
		} {
			r := do(t, c.method, ep+c.path, nil)
			apiError(t, r, http.StatusNotFound, api.CodeNotFound)
			if r.header.Get(api.HeaderLeader) == "" {
				t.Fatalf("%s %s: no %s", c.method, c.path, api.HeaderLeader)
			}
		}
	}
}

func TestWrongMethod(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[0]
	id := "0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ method, path string }{
		{"PUT", "/v1/sessions"},
		{"DELETE", "/v1/sessions"},
		{"POST", "/v1/sessions/" + id},
		{"PUT", "/v1/sessions/" + id},
		{"GET", "/v1/sessions/" + id + "/renew"},
		{"POST", "/v1/sessions/" + id + "/renew"},
		{"POST", "/v1/locks"},
		{"DELETE", "/v1/locks"},
		{"POST", "/v1/locks/a"},
		{"PUT", "/v1/locks/a"},
		{"DELETE", "/v1/locks/a/b"},
		{"GET", "/v1/locks/a/acquire"},
		{"PUT", "/v1/locks/a/acquire"},
		{"GET", "/v1/locks/a/release"},
		{"DELETE", "/v1/locks/a/release"},
		{"POST", "/v1/locks/a/check"},
		{"POST", "/v1/cluster"},
		{"GET", "/v1/cluster/members"},
		{"PUT", "/v1/cluster/members/n1"},
		{"GET", "/v1/cluster/leadership-transfer"},
		{"POST", "/v1/health"},
		{"DELETE", "/v1/ready"},
		{"POST", "/metrics"},
	} {
		r := do(t, c.method, ep+c.path, nil)
		if r.status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: status %d %s", c.method, c.path, r.status, r.body)
			continue
		}
		apiError(t, r, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
	}
}

// TestEncodedNames checks that a name whose slashes arrive percent-encoded, as generated clients
// send it, is decoded once and names the same lock as the plain path.
func TestEncodedNames(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[1]
	s := session(t, ep)
	name := lockName(t) + "/jobs/nightly"
	encoded := strings.ReplaceAll(name, "/", "%2F")

	var g api.AcquireResponse
	ok(t, do(t, http.MethodPost, ep+"/v1/locks/"+encoded+"/acquire", acquireReq(s, "", nil)), http.StatusOK, &g)
	if l := getLock(t, ep, name, ""); !l.Held || l.Token != g.Token || l.Name != name {
		t.Fatalf("lock acquired as %q, read as %q: %+v", encoded, name, l)
	}
	if l := getLock(t, ep, encoded, ""); !l.Held || l.Token != g.Token || l.Name != name {
		t.Fatalf("lock read back as %q: %+v", encoded, l)
	}
	if c := checkLock(t, ep, encoded, g.Token); !c.Current {
		t.Fatalf("check through %q: %+v", encoded, c)
	}
	// Decoded once only: %252F is the three bytes "%2F" of a name, which are refused.
	apiError(t, do(t, http.MethodGet, ep+"/v1/locks/"+strings.ReplaceAll(name, "/", "%252F"), nil), http.StatusBadRequest, api.CodeInvalidArgument)
	release(t, ep, encoded, s, g.Token)
	if l := getLock(t, ep, name, ""); l.Held {
		t.Fatalf("released through %q, still held: %+v", encoded, l)
	}
}
