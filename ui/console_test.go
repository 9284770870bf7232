package ui_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/testkit"
)

// The console, driven in headless Chromium against a real cluster with TLS and ACLs: a lock
// taken through the API appears on the page within a second, its value shown as text; a
// release takes it away; a token without read on a prefix does not see its locks. The page's
// screenshot goes into the test's artifact directory (go test -artifacts keeps it), and into
// docs/console.png with RAFTLOCK_UPDATE_SCREENSHOT=1.

const deadline = 10 * time.Second

// skip skips the test, or fails it under RAFTLOCK_TEST_UI=1 (.ci/run), where Chromium is
// installed and a console test that did not run is a failure.
func skip(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("RAFTLOCK_TEST_UI") == "1" {
		t.Fatalf("RAFTLOCK_TEST_UI=1: "+format, args...)
	}
	t.Skipf(format, args...)
}

// chromium returns the path of a Chromium to drive, or skips the test.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	skip(t, "no Chromium on this machine (Debian: apt-get install chromium): the console test needs one")
	return ""
}

// browser starts headless Chromium trusting the node certificate whose SPKI hash is spki, and
// returns a context of one tab. It skips the test if Chromium cannot start.
func browser(t *testing.T, path, spki string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first Run starts the browser, which lives as long as ctx: no timeout on it.
	if _, err := chromedp.Run(ctx, chromedp.Title()); err != nil {
		skip(t, "Chromium at %s cannot start here: %v", path, err)
	}
	return ctx
}

// spkiHash is the base64 SHA-256 of the public key of the PEM certificate in file, as
// Chromium's --ignore-certificate-errors-spki-list takes it.
func spkiHash(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s holds no PEM block", file)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// apiClient speaks to the cluster's API as a token.
type apiClient struct {
	t   *testing.T
	hc  *http.Client
	ep  string
	tok string
}

func (c apiClient) do(method, path string, body, out any) int {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.ep+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.HeaderToken, c.tok)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		c.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			c.t.Fatal(err)
		}
	}
	return resp.StatusCode
}

func (c apiClient) session(name string) string {
	c.t.Helper()
	var s api.Session
	c.do(http.MethodPost, "/v1/sessions", api.CreateSessionRequest{TTL: "1m", Name: name}, &s)
	return s.ID
}

func (c apiClient) acquire(lock, session, value string) uint64 {
	c.t.Helper()
	var g api.AcquireResponse
	c.do(http.MethodPost, "/v1/locks/"+lock+"/acquire", api.AcquireRequest{Session: session, Value: &value}, &g)
	return g.Token
}

func (c apiClient) release(lock, session string, token uint64) {
	c.t.Helper()
	c.do(http.MethodPost, "/v1/locks/"+lock+"/release", api.ReleaseRequest{Session: session, Token: &token}, nil)
}

// shownLocks returns the names of the lock rows on the page.
func shownLocks(ctx context.Context) ([]string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#locks tbody tr')).map(r => r.dataset.lock)`))
}

// waitShown polls the page until want(names) holds, and returns how long that took.
func waitShown(t *testing.T, ctx context.Context, what string, want func([]string) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		names, err := shownLocks(ctx)
		if err != nil {
			t.Fatalf("%s: reading the page: %v", what, err)
		}
		if want(names) {
			return time.Since(start)
		}
		if time.Since(start) > deadline {
			t.Fatalf("%s: not within %v; the page shows %q (%s)", what, deadline, names, pageState(ctx))
		}
		time.Sleep(10 * time.Millisecond) // a poll interval of the page's DOM, not a synchronisation
	}
}

func useToken(t *testing.T, ctx context.Context, secret string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS("#token"), secret),
		chromedp.Click(chromedp.CSS("#token-form button[type=submit]")),
	)
	if err != nil {
		t.Fatal(err)
	}
}

func TestConsoleShowsLocksLiveUnderTLSAndACL(t *testing.T) {
	chrome := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, ACL: true, Tune: func(c *config.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	}})
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	files, _ := d.TLSFiles()
	tlsCfg, err := files.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: deadline, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	t.Cleanup(hc.CloseIdleConnections)
	ep := d.Endpoints()[0]
	root := apiClient{t: t, hc: hc, ep: ep, tok: d.ManagementToken()}
	certFile, _ := files.NodeFiles(d.Agent(0).Node().ID())
	tab := browser(t, chrome, spkiHash(t, certFile))

	if err := chromedp.Do(tab, chromedp.Navigate(ep+"/ui/")); err != nil {
		t.Fatalf("loading the console over TLS: %v", err)
	}
	// Without a token the page says the cluster needs one.
	waitFor(t, tab, "the page asks for a token", `document.getElementById('locks-error').textContent`, func(s string) bool {
		return strings.Contains(s, "enter a token")
	})

	useToken(t, tab, root.tok)
	sid := root.session("nightly-worker")
	const hostile = `<img src=x onerror="window.__injected=1">host-a & "b"`
	lock := "console/db/migrate"
	token := root.acquire(lock, sid, hostile)
	took := waitShown(t, tab, "the lock taken through the API appears", func(n []string) bool { return slices.Contains(n, lock) })
	// How soon is logged, not asserted (a timed assertion fails on a busy machine); what makes
	// it soon is the streamed watch of the prefix.
	t.Logf("the lock appeared on the page %v after the API granted it", took)
	liveMode(t, tab, root)
	value, err := chromedp.Run(tab, chromedp.Evaluate[string](`document.querySelector('#locks tbody tr td.value').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := chromedp.Run(tab, chromedp.Evaluate[int](`document.querySelectorAll('img').length`))
	if err != nil {
		t.Fatal(err)
	}
	injected, err := chromedp.Run(tab, chromedp.Evaluate[bool](`window.__injected === 1`))
	if err != nil {
		t.Fatal(err)
	}
	if value != hostile || imgs != 0 || injected {
		t.Fatalf("the value is shown as %q with %d img elements (injected %v), want the text %q", value, imgs, injected, hostile)
	}
	waitFor(t, tab, "the holder's session name", `document.querySelector('#locks tbody tr td:nth-child(2)').textContent`, func(s string) bool {
		return strings.HasPrefix(s, "nightly-worker (")
	})
	waitFor(t, tab, "the cluster's members", `String(document.querySelectorAll('#members tbody tr').length)`, func(s string) bool { return s == "3" })
	screenshot(t, tab)

	// Pushed, not polled: with its streams open, a lock taken and a session created reach the
	// page as events of the streams it holds, and the page sends no request meanwhile (as
	// Chromium itself records the requests it sends).
	waitFor(t, tab, "the sessions", shownSessions, func(s string) bool { return strings.Contains(s, sid) })
	sent := countRequests(t, tab)
	before, events := sent.Load(), streamedEvents(t, tab)
	pushed := root.session("pushed-worker")
	root.acquire("console/db/pushed", pushed, "p")
	waitShown(t, tab, "the lock taken, pushed", func(n []string) bool { return slices.Contains(n, "console/db/pushed") })
	waitFor(t, tab, "the session created, pushed", shownSessions, func(s string) bool { return strings.Contains(s, pushed) })
	if n := sent.Load() - before; n != 0 {
		t.Fatalf("the page sent %d requests to the API while it was shown a lock and a session: it asked rather than was told", n)
	}
	if after := streamedEvents(t, tab); after <= events {
		t.Fatalf("the page counts %d stream events before and %d after the changes it showed", events, after)
	}

	root.release(lock, sid, token)
	took = waitShown(t, tab, "the released lock leaves the page", func(n []string) bool { return !slices.Contains(n, lock) })
	t.Logf("the released lock left the page after %v", took)

	// A token that may read console/jobs/ but not console/secret/ sees only the first.
	policy := "console-reader"
	root.do(http.MethodPost, "/v1/acl/policies", api.Policy{Name: policy, Locks: []api.LockRule{
		{Prefix: "console/jobs/", Access: api.AccessRead}, {Prefix: "console/secret/", Access: api.AccessDeny}}, Operator: api.AccessNone}, nil)
	var limited api.NewToken
	root.do(http.MethodPost, "/v1/acl/tokens", api.CreateTokenRequest{Description: "console test", Policies: []string{policy}}, &limited)
	root.acquire("console/secret/key", sid, "hidden")
	root.acquire("console/jobs/nightly", sid, "visible")
	useToken(t, tab, limited.SecretID)
	if err := chromedp.Do(tab, chromedp.SetValue(chromedp.CSS("#prefix"), "console/"), chromedp.SendKeys(chromedp.CSS("#prefix"), "\r")); err != nil {
		t.Fatal(err)
	}
	waitShown(t, tab, "the readable lock appears for the limited token", func(n []string) bool { return slices.Equal(n, []string{"console/jobs/nightly"}) })
	waitFor(t, tab, "the holder of another token's session", `document.querySelector('#locks tbody tr td:nth-child(2)').textContent`, func(s string) bool {
		return strings.HasPrefix(s, "hidden")
	})
	waitFor(t, tab, "the cluster refused to the limited token", `document.getElementById('cluster-error').textContent`, func(s string) bool {
		return strings.Contains(s, "operator:read")
	})
	if names, _ := shownLocks(tab); slices.Contains(names, "console/secret/key") {
		t.Fatalf("a token without read on console/secret/ sees %q", names)
	}
	// The token was entered in the page only: it is in no URL and no storage.
	stored, err := chromedp.Run(tab, chromedp.Evaluate[string](`location.href + JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, limited.SecretID) || strings.Contains(stored, root.tok) {
		t.Fatalf("a token is kept where it may leak: %s", stored)
	}
}

// pageState describes what the page says of its state, for failure messages.
// liveMode checks that the page keeps its locks live through the node's streamed watch.
func liveMode(t *testing.T, ctx context.Context, _ apiClient) {
	t.Helper()
	const want = "live (stream)"
	waitFor(t, ctx, "the page says it is "+want, `document.getElementById('status').textContent`, func(s string) bool {
		return strings.Contains(s, want)
	})
}

// countRequests counts, from now on, the requests the page sends to the API, as Chromium
// reports them.
func countRequests(t *testing.T, tab context.Context) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	ctx, cancel := context.WithCancel(tab)
	t.Cleanup(cancel)
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && strings.Contains(e.Request.URL, "/v1/") {
			n.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(tab, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	return &n
}

// streamedEvents is how many events the page has read from its streams.
func streamedEvents(t *testing.T, tab context.Context) int {
	t.Helper()
	s := evalString(t, tab, `document.getElementById('status').dataset.streamed || '0'`)
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("the page's count of stream events %q: %v", s, err)
	}
	return n
}

func pageState(ctx context.Context) string {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`['status', 'locks-error', 'sessions-error', 'cluster-error'].map(id => id + ': ' + document.getElementById(id).textContent).join('; ')`))
	if err != nil {
		return err.Error()
	}
	return s
}

// waitFor polls a JavaScript expression of the page until ok holds for its value.
func waitFor(t *testing.T, ctx context.Context, what, expr string, ok func(string) bool) {
	t.Helper()
	testkit.Until(t, deadline, what, func() error {
		last, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		if err == nil && ok(last) {
			return nil
		}
		return pageError{ctx: ctx, last: last, err: err}
	})
}

// pageError is a poll's last answer, with the page's state read only when it is reported.
type pageError struct {
	ctx  context.Context
	last string
	err  error
}

func (e pageError) Error() string {
	return fmt.Sprintf("%q (%v; %s)", e.last, e.err, pageState(e.ctx))
}

// screenshot saves the page into the test's artifact directory, and into docs/console.png
// with RAFTLOCK_UPDATE_SCREENSHOT=1.
func screenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.ArtifactDir(), "console.png")
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", out, len(png))
	if os.Getenv("RAFTLOCK_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile(filepath.Join("..", "docs", "console.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
