package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	validationerrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/paths"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/docs"
	"github.com/raftlock/raftlock/httpapi"
)

// docs/openapi.yaml against the server, both ways: every route the server registers (with
// every optional part on) is an operation of the spec, and every operation of the spec is
// routed by a real cluster, plain and with TLS and ACLs; each exchange here is checked against
// the spec like every other of the suite (openapi_check_test.go).

// specCluster is a cluster with TLS, ACLs and pprof, and a checking client for it.
type specCluster struct {
	d    *agent.Dev
	hc   *http.Client
	root string
}

func startSpecCluster(t *testing.T) specCluster {
	t.Helper()
	opts := devOptions(func(c *config.Config) { c.EnablePprof = true })
	opts.TLS, opts.ACL = true, true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, opts)
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	files, _ := d.TLSFiles()
	cfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc := checking(&http.Client{Timeout: deadline, Transport: &http.Transport{TLSClientConfig: cfg}})
	t.Cleanup(hc.CloseIdleConnections)
	return specCluster{d: d, hc: hc, root: d.ManagementToken()}
}

// send sends a request with the root token through the checking client.
func (c specCluster) send(t *testing.T, method, url, contentType string, body []byte) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = http.NoBody
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set(api.HeaderToken, c.root)
	resp, err := c.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data, err: err}
}

func TestOpenAPIMatchesTheServer(t *testing.T) {
	tc := startSpecCluster(t)
	t.Run("every route is in the spec", func(t *testing.T) { testRoutesInSpec(t, tc) })
	t.Run("every operation is routed/plain", func(t *testing.T) {
		testSpecRouted(t, func(method, url, ct string, body []byte) response {
			return rawDo(method, url, body, http.Header{"Content-Type": {ct}})
		}, sharedCluster(t).Endpoints()[0], map[string]bool{"": true, "ui": true})
	})
	t.Run("every operation is routed/tls+acl", func(t *testing.T) {
		testSpecRouted(t, func(method, url, ct string, body []byte) response {
			return tc.send(t, method, url, ct, body)
		}, tc.d.Endpoints()[1], map[string]bool{"": true, "ui": true, "acl": true, "pprof": true})
	})
	t.Run("a walkthrough/tls+acl", func(t *testing.T) { testSpecWalkthrough(t, tc) })
	t.Run("a generated TypeScript client/tls+acl", func(t *testing.T) { testTypeScriptWalkthrough(t, tc) })
}

// Every node serves the spec, without a token under ACL.
func TestOpenAPIServedWithoutToken(t *testing.T) {
	ep := aclCluster(t)[1]
	r := rawDo(http.MethodGet, ep+"/v1/openapi.yaml", nil, nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/yaml" || string(r.body) != string(docs.OpenAPI()) {
		t.Fatalf("GET /v1/openapi.yaml without a token under ACL: %d %q, %d bytes", r.status, r.header.Get("Content-Type"), len(r.body))
	}
}

// routeSamples are concrete paths for an echo route pattern: its parameters filled in, and a
// wildcard replaced by each kind of path it serves.
func routeSamples(t *testing.T, pattern string) []string {
	t.Helper()
	p := regexp.MustCompile(`:[a-z_]+`).ReplaceAllString(pattern, "probe")
	base, wild := strings.CutSuffix(p, "*")
	if !wild {
		return []string{p}
	}
	switch base {
	case "/v1/locks/":
		out := []string{base + "openapi%2Fprobe"}
		for action := range httpapi.ReservedActions {
			out = append(out, base+"openapi%2Fprobe/"+action)
		}
		return out
	case "/ui/":
		return []string{base, base + "console.js"}
	}
	t.Fatalf("route %s has a wildcard this test does not know how to fill: add its paths here and to the spec", pattern)
	return nil
}

func testRoutesInSpec(t *testing.T, tc specCluster) {
	srv := httpapi.New(tc.d.Agent(0).Node(), httpapi.Config{ACL: true, Pprof: true, UI: true})
	defer srv.Close()
	routes := srv.Handler().(*echo.Echo).Routes()
	if len(routes) < 40 {
		t.Fatalf("only %d routes: the walk reads the wrong list", len(routes))
	}
	ep := tc.d.Endpoints()[0]
	for _, r := range routes {
		if strings.HasPrefix(r.Method, "echo_") || r.Method == http.MethodConnect {
			continue // a group's not-found handler; CONNECT needs a proxy-style request
		}
		wildcard := strings.HasSuffix(r.Path, "*")
		for _, path := range routeSamples(t, r.Path) {
			u, _ := url.Parse(ep + path)
			req := &http.Request{Method: r.Method, URL: u, Header: http.Header{}}
			if item, errs, _ := findPath(req); item != nil && len(errs) == 0 {
				continue
			}
			if wildcard {
				// A wildcard takes every method and answers 405 for those it does not serve;
				// only the ones it serves must be in the spec.
				body := []byte(`{"openapi_probe":true}`)
				got := tc.send(t, r.Method, ep+path, "application/json", body)
				if got.status == http.StatusMethodNotAllowed {
					continue
				}
				t.Errorf("%s %s (route %s) answers %d %s, but the spec has no such operation", r.Method, path, r.Path, got.status, short(got.body))
				continue
			}
			t.Errorf("route %s %s is not an operation of docs/openapi.yaml", r.Method, r.Path)
		}
	}
}

// sampleValue fills a path parameter of the spec with a value that names nothing that
// exists, so that no probe changes the cluster, but that the route takes.
func sampleValue(name string) string {
	switch name {
	case "asset":
		return "console.js"
	case "profile":
		return "heap"
	case "name":
		return "openapi%2Fprobe"
	}
	return "probe"
}

// testSpecRouted sends each operation of the spec that the node has (by its flags) a request
// that names nothing real or carries a body with an unknown field, and checks that a route
// took it: no 404 "no such route", no 405.
func testSpecRouted(t *testing.T, send func(method, url, contentType string, body []byte) response, ep string, flags map[string]bool) {
	n := 0
	for tmpl, item := range spec.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			method = strings.ToUpper(method)
			if !flags[requires(item, method)] {
				continue
			}
			path := regexp.MustCompile(`\{([a-z_]+)\}`).ReplaceAllStringFunc(tmpl, func(p string) string { return sampleValue(p[1 : len(p)-1]) })
			path += probeQuery(op)
			var body []byte
			ct := ""
			if op.RequestBody != nil && op.RequestBody.Content != nil {
				if _, ok := op.RequestBody.Content.Get("application/json"); ok {
					body, ct = []byte(`{"openapi_probe":true}`), "application/json"
				} else {
					body, ct = []byte("not a backup"), "application/octet-stream"
				}
			}
			r := send(method, ep+path, ct, body)
			if r.err != nil {
				t.Fatalf("%s %s: %v", method, path, r.err)
			}
			var eb api.ErrorBody
			_ = json.Unmarshal(r.body, &eb)
			if r.status == http.StatusMethodNotAllowed || r.status == http.StatusNotFound && strings.HasPrefix(eb.Error.Message, "no such route") {
				t.Errorf("%s %s (spec %s) is not routed: %d %s", method, path, tmpl, r.status, short(r.body))
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("only %d operations probed: the walk reads the wrong spec", n)
	}
	t.Logf("%d operations of the spec answered through %s", n, ep)
}

// probeQuery gives the required query parameters of op values that name nothing real, and
// bounds a profile to one second.
func probeQuery(op *v3.Operation) string {
	var q []string
	for _, p := range op.Parameters {
		switch {
		case p.In == "query" && p.Name == "seconds":
			q = append(q, "seconds=1")
		case p.In == "query" && p.Required != nil && *p.Required:
			q = append(q, p.Name+"=1")
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.Join(q, "&")
}

// testSpecWalkthrough uses the API over TLS with tokens as a client would, so that these
// exchanges are checked too: a session, a grant, a refusal, a wait granted by a release, the
// fencing check, the lists, and the refusals of a token without rights and of none.
func testSpecWalkthrough(t *testing.T, tc specCluster) {
	ep := tc.d.Endpoints()[2]
	post := func(path string, body any) response {
		data, _ := json.Marshal(body)
		return tc.send(t, http.MethodPost, ep+path, "application/json", data)
	}
	var s1, s2 api.Session
	ok(t, post("/v1/sessions", api.CreateSessionRequest{TTL: "30s", Name: "spec-1"}), http.StatusCreated, &s1)
	ok(t, post("/v1/sessions", api.CreateSessionRequest{TTL: "30s", Name: "spec-2", LockDelay: "1s"}), http.StatusCreated, &s2)
	lock := "spec/walk"
	var g api.AcquireResponse
	ok(t, post("/v1/locks/"+lock+"/acquire", acquireReq(s1.ID, "", strp("a"))), http.StatusOK, &g)
	apiError(t, post("/v1/locks/"+lock+"/acquire", acquireReq(s2.ID, "", nil)), http.StatusConflict, api.CodeLockHeld, "holder")
	waited := make(chan response, 1)
	go func() {
		data, _ := json.Marshal(acquireReq(s2.ID, "10s", nil))
		waited <- tc.send(t, http.MethodPost, ep+"/v1/locks/"+lock+"/acquire", "application/json", data)
	}()
	eventually(t, "the second session waits", func() string {
		var l api.Lock
		ok(t, tc.send(t, http.MethodGet, ep+"/v1/locks/"+lock, "", nil), http.StatusOK, &l)
		if l.Waiters != 1 {
			return fmt.Sprintf("%d waiters", l.Waiters)
		}
		return ""
	})
	ok(t, post("/v1/locks/"+lock+"/release", api.ReleaseRequest{Session: s1.ID, Token: &g.Token}), http.StatusOK, nil)
	var g2 api.AcquireResponse
	ok(t, <-waited, http.StatusOK, &g2)
	var chk api.CheckResponse
	ok(t, tc.send(t, http.MethodGet, fmt.Sprintf("%s/v1/locks/%s/check?token=%d", ep, url.PathEscape(lock), g.Token), "", nil), http.StatusOK, &chk)
	if chk.Current || chk.Token != g2.Token {
		t.Fatalf("check of the old token: %+v, want not current, token %d", chk, g2.Token)
	}
	for _, path := range []string{"/v1/locks?prefix=spec/", "/v1/sessions", "/v1/sessions/" + s2.ID, "/v1/cluster", "/v1/acl/token/self", "/v1/health", "/v1/ready"} {
		ok(t, tc.send(t, http.MethodGet, ep+path, "", nil), http.StatusOK, nil)
	}
	ok(t, tc.send(t, http.MethodPut, ep+"/v1/sessions/"+s1.ID+"/renew", "", nil), http.StatusOK, nil)
	ok(t, post("/v1/sessions/renew", api.RenewSessionsRequest{IDs: []string{s1.ID, s2.ID}}), http.StatusOK, nil)
	ok(t, tc.send(t, http.MethodDelete, ep+"/v1/sessions/"+s2.ID, "", nil), http.StatusOK, nil)
	var none api.NewToken
	ok(t, post("/v1/acl/tokens", api.CreateTokenRequest{Description: "no rights"}), http.StatusOK, &none)
	req, _ := http.NewRequest(http.MethodGet, ep+"/v1/locks/"+lock, nil)
	req.Header.Set("Authorization", "Bearer "+none.SecretID)
	resp, err := tc.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	refused(t, response{status: resp.StatusCode, header: resp.Header, body: data}, http.StatusForbidden, "read access")
	req, _ = http.NewRequest(http.MethodGet, ep+"/v1/cluster", nil)
	if resp, err = tc.hc.Do(req); err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	refused(t, response{status: resp.StatusCode, header: resp.Header, body: data}, http.StatusUnauthorized, "token")
}

// findPath matches a request to the spec's operations, its lock name encoded as the spec has it.
func findPath(req *http.Request) (*v3.PathItem, []*validationerrors.ValidationError, string) {
	return paths.FindPath(canonical(req.WithContext(context.Background()), nil), spec.model, nil)
}

// The console is served with its security headers, and not at all with --ui=false.
func TestConsoleOnlyWithUI(t *testing.T) {
	node := sharedCluster(t).Agent(0).Node()
	for _, on := range []bool{true, false} {
		srv := httpapi.New(node, httpapi.Config{UI: on})
		for _, path := range []string{"/ui/", "/ui/console.js"} {
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			switch {
			case on && (rec.Code != http.StatusOK || !strings.Contains(rec.Header().Get("Content-Security-Policy"), "default-src 'none'")):
				t.Errorf("UI on: GET %s answered %d with CSP %q", path, rec.Code, rec.Header().Get("Content-Security-Policy"))
			case !on && rec.Code != http.StatusNotFound:
				t.Errorf("UI off: GET %s answered %d, want 404", path, rec.Code)
			}
		}
		srv.Close()
	}
}
