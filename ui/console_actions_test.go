package ui_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/testkit"
)

// interceptor pauses the tab's requests whose URL matches one of its patterns and hands each to
// handle, on one goroutine, until the test ends.
func interceptor(t *testing.T, tab context.Context, patterns []string, handle func(ctx context.Context, ev fetch.EventRequestPaused)) {
	t.Helper()
	ctx, cancel := context.WithCancel(tab)
	events := chromedp.Events(ctx, fetch.RequestPaused)
	ps := make([]*fetch.RequestPattern, len(patterns))
	for i, p := range patterns {
		ps[i] = &fetch.RequestPattern{URLPattern: p}
	}
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{Patterns: ps}); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range events {
			if err != nil {
				return
			}
			handle(ctx, ev)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

// gate holds the paused requests until it is opened, then lets them and all later ones go on.
type gate struct {
	mu     sync.Mutex
	open   bool
	held   []fetch.RequestID
	paused chan struct{} // closed at the first paused request
	once   sync.Once
}

func (g *gate) handle(ctx context.Context, ev fetch.EventRequestPaused) {
	g.once.Do(func() { close(g.paused) })
	g.mu.Lock()
	if !g.open {
		g.held = append(g.held, ev.RequestID)
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
}

func (g *gate) release(ctx context.Context) {
	g.mu.Lock()
	g.open = true
	held := g.held
	g.held = nil
	g.mu.Unlock()
	for _, id := range held {
		_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: id})
	}
}

// evalString evaluates a JavaScript expression of the page that gives a string.
func evalString(t *testing.T, tab context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s
}

func click(t *testing.T, tab context.Context, selector string) {
	t.Helper()
	if err := chromedp.Do(tab, chromedp.Click(chromedp.CSS(selector))); err != nil {
		t.Fatalf("clicking %s: %v", selector, err)
	}
}

// shownSessions is the expression of the session ids of the rows on the page, joined by commas.
const shownSessions = `Array.from(document.querySelectorAll('#sessions tbody tr')).map(r => r.dataset.session).join(',')`

// The console through the console listener (--console-addr) of a cluster whose API port
// requires client certificates: a browser without one loads it, shows "Loading…" until its first
// answers arrive, links a lock's holder to its session's row, filters the sessions by name or
// id, shows a session's time left and last renewal, and destroys a session after a confirmation,
// audited; a token that may see a session but not destroy it sees the 403.
func TestConsoleLoadsLinksFiltersAndDestroysThroughTheConsoleListener(t *testing.T) {
	chrome := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	auditDir := t.TempDir()
	d, err := agent.StartDev(ctx, agent.DevOptions{TLS: true, ACL: true, Console: true, Tune: func(c *config.Config) {
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
		c.TLSVerifyClients = true
		c.AuditLog = filepath.Join(auditDir, c.ID+".jsonl")
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
	tlsCfg.Certificates = nil // the console listener asks for none
	hc := &http.Client{Timeout: deadline, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	t.Cleanup(hc.CloseIdleConnections)
	ep := d.ConsoleEndpoints()[0]
	root := bearerClient{apiClient{t: t, hc: hc, ep: ep, tok: d.ManagementToken()}}
	certFile, _ := files.NodeFiles(d.Agent(0).Node().ID())
	tab := browser(t, chrome, spkiHash(t, certFile))

	// Loading: with the API's answers held back, every section says so, and none says it is
	// empty.
	g := &gate{paused: make(chan struct{})}
	interceptor(t, tab, []string{"*/v1/*"}, g.handle)
	if err := chromedp.Do(tab, chromedp.Navigate(ep+"/ui/")); err != nil {
		t.Fatalf("loading the console through the console listener without a client certificate: %v", err)
	}
	select {
	case <-g.paused:
	case <-ctx.Done():
		t.Fatal("the page asked the API for nothing")
	}
	state := evalString(t, tab, `['cluster-loading', 'locks-loading', 'sessions-loading', 'locks-empty', 'sessions-empty'].map(id => id + '=' + (document.getElementById(id).hidden ? 'hidden' : 'shown')).join(' ') + ' status=' + document.getElementById('status').textContent`)
	if state != "cluster-loading=shown locks-loading=shown sessions-loading=shown locks-empty=hidden sessions-empty=hidden status=loading…" {
		t.Fatalf("before the first answer the page shows %s", state)
	}
	g.release(tab)
	waitFor(t, tab, "the loading notes go with the first answers", `['cluster-loading', 'locks-loading', 'sessions-loading'].map(id => document.getElementById(id).hidden).join()`, func(s string) bool {
		return s == "true,true,true"
	})
	waitFor(t, tab, "the page asks for a token", `document.getElementById('locks-error').textContent`, func(s string) bool {
		return strings.Contains(s, "enter a token")
	})

	useToken(t, tab, root.tok)
	alpha := root.session("alpha-worker")
	beta := root.session("beta-worker")
	lock := "console2/jobs/a"
	root.acquire(lock, alpha, "v")
	waitShown(t, tab, "the lock", func(n []string) bool { return slices.Contains(n, lock) })
	waitFor(t, tab, "both sessions", shownSessions, func(s string) bool {
		return strings.Contains(s, alpha) && strings.Contains(s, beta)
	})

	// The filter, by name and by id.
	setFilter := func(text string) {
		t.Helper()
		evalString(t, tab, `(document.getElementById('session-filter').value = '')`)
		if err := chromedp.Do(tab, chromedp.SendKeys(chromedp.CSS("#session-filter"), text)); err != nil {
			t.Fatal(err)
		}
	}
	setFilter("BETA")
	waitFor(t, tab, "the filter by name", shownSessions, func(s string) bool { return s == beta })
	setFilter(alpha[4:12])
	waitFor(t, tab, "the filter by id", shownSessions, func(s string) bool { return s == alpha })
	setFilter("no-such-session")
	waitFor(t, tab, "a filter that matches nothing says so", `document.getElementById('sessions-filtered').hidden ? '' : document.getElementById('sessions-filtered').textContent`, func(s string) bool {
		return strings.Contains(s, "matches")
	})

	// The lock's holder links to its session's row, clearing the filter that hid it.
	setFilter("beta")
	waitFor(t, tab, "the filter by name again", shownSessions, func(s string) bool { return s == beta })
	click(t, tab, `#locks tbody tr[data-lock="`+lock+`"] button.session-link`)
	waitFor(t, tab, "the holder's session row, selected", `Array.from(document.querySelectorAll('#sessions tbody tr.selected')).map(r => r.dataset.session).join()`, func(s string) bool {
		return s == alpha
	})
	if f := evalString(t, tab, `document.getElementById('session-filter').value`); f != "" {
		t.Fatalf("the filter %q still hides the linked session", f)
	}
	if href := evalString(t, tab, `location.href`); strings.Contains(href, alpha) {
		t.Fatalf("the session id, its capability, went into the URL %s", href)
	}

	// Time left, from the leader; the last renewal once there is one.
	row := `#sessions tbody tr[data-session="` + alpha + `"] `
	waitFor(t, tab, "the time left", `document.querySelector('`+row+`td.left').textContent`, func(s string) bool {
		d, err := time.ParseDuration(s)
		return err == nil && d > 0 && d <= time.Minute
	})
	root.do(http.MethodPut, "/v1/sessions/"+alpha+"/renew", nil, nil)
	waitFor(t, tab, "the last renewal", `document.querySelector('`+row+`td.renewed').textContent`, func(s string) bool {
		return strings.HasSuffix(s, "s ago")
	})

	// Destroy: cancelled, nothing happens; confirmed, the session is gone and its lock free.
	click(t, tab, row+`button.destroy`)
	waitFor(t, tab, "the confirmation", `String(document.getElementById('destroy-dialog').open) + ' ' + document.getElementById('destroy-text').textContent`, func(s string) bool {
		return strings.HasPrefix(s, "true ") && strings.Contains(s, "alpha-worker") && strings.Contains(s, lock)
	})
	click(t, tab, "#destroy-cancel")
	waitFor(t, tab, "the confirmation closed", `String(document.getElementById('destroy-dialog').open)`, func(s string) bool { return s == "false" })
	if code := root.status(http.MethodGet, "/v1/sessions/"+alpha); code != http.StatusOK {
		t.Fatalf("a cancelled destroy: GET the session answered %d", code)
	}
	click(t, tab, row+`button.destroy`)
	waitFor(t, tab, "the confirmation again", `String(document.getElementById('destroy-dialog').open)`, func(s string) bool { return s == "true" })
	click(t, tab, "#destroy-confirm")
	waitFor(t, tab, "the destroy reported", `document.getElementById('session-action').textContent`, func(s string) bool {
		return strings.HasPrefix(s, "Destroyed session alpha-worker") && strings.Contains(s, "released "+lock)
	})
	waitFor(t, tab, "the session's row gone", shownSessions, func(s string) bool { return !strings.Contains(s, alpha) })
	if code := root.status(http.MethodGet, "/v1/sessions/"+alpha); code != http.StatusNotFound {
		t.Fatalf("after the destroy, GET the session answered %d", code)
	}
	waitShown(t, tab, "the lock freed", func(n []string) bool { return !slices.Contains(n, lock) })

	// A token that may see every session (operator:read) but owns none may destroy none: the
	// server refuses, the page says so, and the session lives.
	root.do(http.MethodPost, "/v1/acl/policies", api.Policy{Name: "console-watcher", Locks: []api.LockRule{
		{Prefix: "console2/", Access: api.AccessWrite}}, Operator: api.AccessRead}, nil)
	var watcher api.NewToken
	root.do(http.MethodPost, "/v1/acl/tokens", api.CreateTokenRequest{Description: "console destroy test", Policies: []string{"console-watcher"}}, &watcher)
	useToken(t, tab, watcher.SecretID)
	row = `#sessions tbody tr[data-session="` + beta + `"] `
	waitFor(t, tab, "another token's session, seen", shownSessions, func(s string) bool { return strings.Contains(s, beta) })
	click(t, tab, row+`button.destroy`)
	waitFor(t, tab, "the confirmation for the watcher", `String(document.getElementById('destroy-dialog').open)`, func(s string) bool { return s == "true" })
	click(t, tab, "#destroy-confirm")
	waitFor(t, tab, "the refusal, shown", `document.getElementById('session-action').className + ': ' + document.getElementById('session-action').textContent`, func(s string) bool {
		return strings.HasPrefix(s, "bad: Refused (403 forbidden): this token may not destroy session beta-worker") && strings.Contains(s, "belongs to another token")
	})
	if code := root.status(http.MethodGet, "/v1/sessions/"+beta); code != http.StatusOK {
		t.Fatalf("after a refused destroy, GET the session answered %d", code)
	}
	screenshot(t, tab)

	// Both destroys are in the audit log of the node the page spoke to, with their status.
	audit := filepath.Join(auditDir, d.Agent(0).Node().ID()+".jsonl")
	testkit.Until(t, deadline, "the destroys in the audit log", func() error {
		data, err := os.ReadFile(audit)
		if err != nil {
			return err
		}
		var ok, refused bool
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var e struct {
				Method, Path string
				Status       int
			}
			if json.Unmarshal([]byte(line), &e) != nil || e.Method != http.MethodDelete {
				continue
			}
			ok = ok || e.Path == "/v1/sessions/"+alpha && e.Status == http.StatusOK
			refused = refused || e.Path == "/v1/sessions/"+beta && e.Status == http.StatusForbidden
		}
		if !ok || !refused {
			return errAudit(string(data))
		}
		return nil
	})
}

type errAudit string

func (e errAudit) Error() string { return "the audit log holds: " + string(e) }

// bearerClient is an apiClient that sends its token as Authorization: Bearer, as a client of
// the console listener without the CLI would.
type bearerClient struct{ apiClient }

// status answers a request's status alone.
func (c bearerClient) status(method, path string) int {
	c.t.Helper()
	req, err := http.NewRequest(method, c.ep+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.tok)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
