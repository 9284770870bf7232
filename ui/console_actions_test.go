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

// What the page makes of grant times, queues and waits (the fields "since", "queue" and
// "waiting" of the lock and session answers), and of an older server's answers without them:
// the page's requests for locks and sessions are answered with fixed JSON, in Chromium, while
// the rest goes to a real node.
func TestConsoleShowsGrantTimesQueuesAndWaitsFromTheAPI(t *testing.T) {
	chrome := chromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := agent.StartDev(ctx, agent.DevOptions{Nodes: 1})
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	tab := browser(t, chrome, "")

	const s1, s2, s3 = "11111111aaaaaaaaaaaaaaaaaaaaaaaa", "22222222bbbbbbbbbbbbbbbbbbbbbbbb", "33333333cccccccccccccccccccccccc"
	now := time.Now().UTC()
	at := func(ago time.Duration) string { return now.Add(-ago).Format(time.RFC3339Nano) }
	locks := map[string]any{"locks": []map[string]any{
		{"name": "jobs/a", "held": true, "session": s1, "token": 7, "value": "x", "since": at(5 * time.Minute), "waiters": 2, "modify_index": 7,
			"queue": []map[string]any{
				{"session": s2, "name": "second", "mode": "exclusive", "since": at(90 * time.Second)},
				{"name": "", "mode": "exclusive", "since": at(30 * time.Second)}, // another token's: redacted
			}},
		{"name": "jobs/old", "held": true, "session": s2, "token": 9, "value": "", "waiters": 1, "modify_index": 9}, // an older server
		{"name": "jobs/rw", "held": true, "session": s1, "token": 11, "value": "", "waiters": 0, "modify_index": 12, "since": at(2 * time.Minute),
			"holders": []map[string]any{
				{"session": s1, "token": 11, "value": "", "mode": "shared", "since": at(2 * time.Minute)},
				{"session": s3, "token": 12, "value": "", "mode": "shared", "since": at(10 * time.Second)},
			}, "queue": []map[string]any{}},
	}}
	sessions := map[string]any{"sessions": []map[string]any{
		{"id": s1, "name": "first", "ttl": "10s", "lock_delay": "0s", "created_index": 3, "locks": []string{"jobs/a", "jobs/rw"},
			"expires_in": "7.5s", "last_renewal": at(3 * time.Second), "waiting": []map[string]any{}},
		{"id": s2, "name": "second", "ttl": "10s", "lock_delay": "0s", "created_index": 4, "locks": []string{"jobs/old"},
			"waiting": []map[string]any{{"lock": "jobs/a", "since": at(90 * time.Second)}}},
		{"id": s3, "name": "third", "ttl": "10s", "lock_delay": "0s", "created_index": 5, "locks": []string{"jobs/rw"}},
	}}
	answer := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	locksBody, sessionsBody := answer(locks), answer(sessions)
	interceptor(t, tab, []string{"*/v1/locks*", "*/v1/sessions*"}, func(ctx context.Context, ev fetch.EventRequestPaused) {
		body := sessionsBody
		if strings.Contains(ev.Request.URL, "/v1/locks") {
			body = locksBody
		}
		_, _ = chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: ev.RequestID, ResponseCode: 200,
			ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}}, Body: body})
	})
	if err := chromedp.Do(tab, chromedp.Navigate(d.Endpoints()[0]+"/ui/")); err != nil {
		t.Fatal(err)
	}
	waitShown(t, tab, "the fixed locks", func(n []string) bool { return slices.Equal(n, []string{"jobs/a", "jobs/old", "jobs/rw"}) })

	cells := func(lock, cell string) string {
		return `Array.from(document.querySelectorAll('#locks tbody tr[data-lock="` + lock + `"] td.` + cell + ` > div')).map(d => d.textContent).join(' | ')`
	}
	// "held for" counts from the grant, not from the page's load.
	waitFor(t, tab, "held for, from since", cells("jobs/a", "age"), func(s string) bool { return s == "5m00s" || s == "5m01s" || s == "5m02s" })
	waitFor(t, tab, "each holder's own time", cells("jobs/rw", "age"), func(s string) bool {
		a, b, _ := strings.Cut(s, " | ")
		return strings.HasPrefix(a, "2m0") && (b == "10s" || b == "11s" || b == "12s")
	})
	// The queue in order: the session linked, its name, mode and how long it has waited; another
	// token's waiter without its session.
	waitFor(t, tab, "the queue", cells("jobs/a", "waiters"), func(s string) bool {
		first, second, _ := strings.Cut(s, " | ")
		return strings.HasPrefix(first, "1. second (22222222…) · exclusive · waiting 1m3") &&
			strings.HasPrefix(second, "2. hidden (another token’s session) · exclusive · waiting 3")
	})
	// An older server: no grant time (at least since the page saw it), a count of waiters.
	waitFor(t, tab, "an older server's lock", cells("jobs/old", "age")+` + ' / ' + document.querySelector('#locks tbody tr[data-lock="jobs/old"] td.waiters').textContent`, func(s string) bool {
		return strings.HasPrefix(s, "≥ ") && strings.HasSuffix(s, " / 1")
	})
	// Sessions: time left and last renewal where the leader gave them, and what each waits for.
	srow := func(id, cell string) string {
		return `document.querySelector('#sessions tbody tr[data-session="` + id + `"] td.` + cell + `').textContent`
	}
	waitFor(t, tab, "the time left", srow(s1, "left"), func(s string) bool {
		d, err := time.ParseDuration(s)
		return err == nil && d > 0 && d <= 7*time.Second
	})
	waitFor(t, tab, "the last renewal", srow(s1, "renewed"), func(s string) bool { return s == "3s ago" || s == "4s ago" || s == "5s ago" })
	waitFor(t, tab, "no lease known (a follower's stale answer)", srow(s3, "left")+` + ' / ' + `+srow(s3, "renewed"), func(s string) bool { return s == "— / —" })
	waitFor(t, tab, "what a session waits for", srow(s2, "waits"), func(s string) bool { return strings.HasPrefix(s, "jobs/a · 1m3") })
	// A waiter's link leads to its session's row.
	click(t, tab, `#locks tbody tr[data-lock="jobs/a"] td.waiters button.session-link`)
	waitFor(t, tab, "the waiter's session row, selected", `Array.from(document.querySelectorAll('#sessions tbody tr.selected')).map(r => r.dataset.session).join()`, func(s string) bool {
		return s == s2
	})
}
