package httpapi_test

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The TypeScript client in clients/typescript is generated from docs/openapi.yaml
// (openapi-typescript, types only) and sends its requests with openapi-fetch; its walkthrough
// drives the TLS + ACL cluster through a proxy whose transport checks every exchange against
// the spec, like the suite's own clients. It needs node and npm: without them, or without
// clients/typescript/node_modules, the test is skipped unless RAFTLOCK_TEST_TS=1 (as in
// .ci/run), which makes it install the locked packages (npm ci) and fail when it cannot.

const tsDir = "../clients/typescript"

// tsTool runs a command of the TypeScript client's directory and returns its output.
func tsTool(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = tsDir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// prepareTS makes the generated client and its walkthrough, or skips the test.
func prepareTS(t *testing.T) {
	t.Helper()
	required := os.Getenv("RAFTLOCK_TEST_TS") == "1"
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if required {
				t.Fatalf("RAFTLOCK_TEST_TS=1 but %s is not installed", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	if _, err := os.Stat(filepath.Join(tsDir, "node_modules")); err != nil {
		if !required {
			t.Skip("clients/typescript has no node_modules: run npm ci there, or set RAFTLOCK_TEST_TS=1")
		}
		tsTool(t, nil, "npm", "ci", "--no-audit", "--no-fund")
	}
	tsTool(t, nil, "npm", "run", "--silent", "generate")
	tsTool(t, nil, "npm", "run", "--silent", "build")
}

// statusCounter counts the answers by status of the requests that go through it.
type statusCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen map[int]int
}

func (c *statusCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil {
		c.mu.Lock()
		c.seen[resp.StatusCode]++
		c.mu.Unlock()
	}
	return resp, err
}

func testTypeScriptWalkthrough(t *testing.T, tc specCluster) {
	prepareTS(t)
	target, err := url.Parse(tc.d.Endpoints()[1])
	if err != nil {
		t.Fatal(err)
	}
	// The proxy speaks TLS too, with its own certificate, which node is told to trust.
	counter := &statusCounter{next: tc.hc.Transport, seen: map[int]int{}}
	proxy := httptest.NewUnstartedServer(&httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: counter,
	})
	proxy.StartTLS()
	defer proxy.Close()
	ca := filepath.Join(t.TempDir(), "proxy-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: proxy.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	out := tsTool(t, []string{"RAFTLOCK_URL=" + proxy.URL, "RAFTLOCK_TOKEN=" + tc.root, "RAFTLOCK_LOCK=ts/walk", "NODE_EXTRA_CA_CERTS=" + ca},
		"node", "dist/walkthrough.js")
	t.Log(strings.TrimSpace(out))
	if !strings.Contains(out, "walkthrough ok") {
		t.Fatalf("the walkthrough did not finish: %s", out)
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	// Its exchanges went through the checking transport: the refusals among them.
	if counter.seen[http.StatusOK] < 8 || counter.seen[http.StatusConflict] != 2 || counter.seen[http.StatusUnauthorized] != 1 {
		t.Fatalf("answers by status through the proxy: %v, want at least 8×200, 2×409 and 1×401", counter.seen)
	}
}
