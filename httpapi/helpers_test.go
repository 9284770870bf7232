package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/internal/testkit"
)

// HTTP helpers: requests, answers and their checks.

// httpClient sends every request of the suite; each exchange is checked against
// docs/openapi.yaml (openapi_check_test.go).
var httpClient = checking(&http.Client{Timeout: 60 * time.Second})

// response is one answer of the server, read in full.
type response struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// rawDo sends a request; body is nil, a string or []byte sent as is, or a value sent as JSON.
func rawDo(method, url string, body any, hdr http.Header) response {
	return rawDoCtx(context.Background(), method, url, body, hdr)
}

func rawDoCtx(ctx context.Context, method, url string, body any, hdr http.Header) response {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return response{err: err}
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return response{err: err}
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	return exchange(httpClient, req)
}

// exchange sends req with hc and reads the whole answer.
func exchange(hc *http.Client, req *http.Request) response {
	resp, err := hc.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: data, err: err}
}

// do sends a request and fails the test if no answer came back.
func do(t *testing.T, method, url string, body any) response {
	t.Helper()
	r := rawDo(method, url, body, nil)
	if r.err != nil {
		t.Fatalf("%s %s: %v", method, url, r.err)
	}
	return r
}

// goDo sends a request in the background; the channel yields its answer.
func goDo(ctx context.Context, method, url string, body any) <-chan response {
	ch := make(chan response, 1)
	go func() { ch <- rawDoCtx(ctx, method, url, body, nil) }()
	return ch
}

// await returns the answer of a background request, failing after the deadline.
func await(t *testing.T, ch <-chan response, what string) response {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r
	case <-time.After(deadline):
		t.Fatalf("%s: no answer within %v", what, deadline)
	}
	return response{}
}

// pending fails the test if the background request has already answered.
func pending(t *testing.T, ch <-chan response, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s answered early: %d %s (err %v)", what, r.status, short(r.body), r.err)
	default:
	}
}

// ok checks the status and that the body is a JSON object, and decodes it into v (if not nil).
func ok(t *testing.T, r response, status int, v any) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, short(r.body))
	}
	checkJSONType(t, r)
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			t.Fatalf("decoding %s: %v", r.body, err)
		}
	}
}

func checkJSONType(t *testing.T, r response) {
	t.Helper()
	mt, _, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		t.Fatalf("Content-Type %q, want application/json; body %s", r.header.Get("Content-Type"), r.body)
	}
}

// short returns a body for a failure message, cut if long.
func short(body []byte) string {
	if len(body) > 300 {
		return fmt.Sprintf("%s... (%d bytes)", body[:300], len(body))
	}
	return string(body)
}

// fields decodes a JSON object body into its raw fields.
func fields(t *testing.T, data []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, data)
	}
	return m
}

// keys returns the sorted keys of m.
func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// hasKeys fails unless the object's keys are exactly want.
func hasKeys(t *testing.T, m map[string]json.RawMessage, want ...string) {
	t.Helper()
	sort.Strings(want)
	if got := keys(m); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("fields %v, want exactly %v", got, want)
	}
}

// without returns m without the optional keys, which an object may or may not have.
func without(m map[string]json.RawMessage, optional ...string) map[string]json.RawMessage {
	for _, k := range optional {
		delete(m, k)
	}
	return m
}

// grantTime parses a grant's or queue entry's "since", which must be RFC 3339 with nanoseconds
// in UTC, and not in the future.
func grantTime(t *testing.T, since string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, since)
	if err != nil || !strings.HasSuffix(since, "Z") || at.After(time.Now()) {
		t.Fatalf("since %q is not a past RFC 3339 UTC time: %v", since, err)
	}
	return at
}

// apiError checks an error answer: the status, the code, the exact shape of the body (extra
// top-level fields only as named), JSON content type and the index header. It returns the body.
func apiError(t *testing.T, r response, status int, code string, extra ...string) api.ErrorBody {
	t.Helper()
	if r.err != nil {
		t.Fatalf("no answer: %v", r.err)
	}
	if r.status != status {
		t.Fatalf("status %d, want %d (%s); body %s", r.status, status, code, short(r.body))
	}
	checkJSONType(t, r)
	top := fields(t, r.body)
	hasKeys(t, top, append([]string{"error"}, extra...)...)
	inner := fields(t, top["error"])
	hasKeys(t, inner, "code", "message")
	var eb api.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil {
		t.Fatal(err)
	}
	if eb.Error.Code != code {
		t.Fatalf("code %q, want %q; body %s", eb.Error.Code, code, r.body)
	}
	if strings.TrimSpace(eb.Error.Message) == "" {
		t.Fatalf("empty message: %s", r.body)
	}
	if r.header.Get(api.HeaderIndex) == "" {
		t.Fatalf("error answer without %s", api.HeaderIndex)
	}
	return eb
}

// eventually polls cond until it returns "" or the deadline passes, then fails with its last reason.
func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	testkit.Until(t, deadline, what, func() error {
		if why := cond(); why != "" {
			return errors.New(why)
		}
		return nil
	})
}

var nameSeq atomic.Uint64

var nameRe = regexp.MustCompile(`[^A-Za-z0-9._:/-]+`)

// lockName returns a lock name no other test uses.
func lockName(t *testing.T) string {
	return fmt.Sprintf("t/%s/%d", nameRe.ReplaceAllString(t.Name(), "-"), nameSeq.Add(1))
}

var hexID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// createSession creates a session through ep and returns it.
func createSession(t *testing.T, ep string, req api.CreateSessionRequest) api.Session {
	t.Helper()
	var s api.Session
	ok(t, do(t, http.MethodPost, ep+"/v1/sessions", req), http.StatusCreated, &s)
	if !hexID.MatchString(s.ID) {
		t.Fatalf("session id %q is not 32 hex characters", s.ID)
	}
	return s
}

// session creates a session with a 30s TTL through ep.
func session(t *testing.T, ep string) string {
	t.Helper()
	return createSession(t, ep, api.CreateSessionRequest{TTL: "30s"}).ID
}

// acquireReq is the body of an acquire by session with an optional wait and value.
func acquireReq(session, wait string, value *string) api.AcquireRequest {
	return api.AcquireRequest{Session: session, Wait: wait, Value: value}
}

// mustAcquire takes a free lock and returns the grant.
func mustAcquire(t *testing.T, ep, name, session string, value *string) api.AcquireResponse {
	t.Helper()
	var g api.AcquireResponse
	ok(t, do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(session, "", value)), http.StatusOK, &g)
	if g.Name != name || g.Session != session || g.Token == 0 {
		t.Fatalf("grant %+v for %s by %s", g, name, session)
	}
	return g
}

// release releases name held by session under token and expects success.
func release(t *testing.T, ep, name, session string, token uint64) {
	t.Helper()
	var rr api.ReleaseResponse
	r := do(t, http.MethodPost, ep+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: session, Token: &token})
	ok(t, r, http.StatusOK, &rr)
	hasKeys(t, fields(t, r.body), "released")
	if !rr.Released {
		t.Fatalf("release answered %s", r.body)
	}
}

// getLock reads a lock (linearizably unless q says otherwise).
func getLock(t *testing.T, ep, name, q string) api.Lock {
	t.Helper()
	var l api.Lock
	ok(t, do(t, http.MethodGet, ep+"/v1/locks/"+name+q, nil), http.StatusOK, &l)
	return l
}

// waitWaiters polls the lock until it has n waiters.
func waitWaiters(t *testing.T, ep, name string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s has %d waiters", name, n), func() string {
		if l := getLock(t, ep, name, ""); l.Waiters != n {
			return fmt.Sprintf("waiters %d", l.Waiters)
		}
		return ""
	})
}

func strp(s string) *string { return &s }

// indexHeader returns the X-Raftlock-Index of an answer as a number.
func indexHeader(t *testing.T, r response) uint64 {
	t.Helper()
	var i uint64
	if _, err := fmt.Sscan(r.header.Get(api.HeaderIndex), &i); err != nil || i == 0 {
		t.Fatalf("%s = %q", api.HeaderIndex, r.header.Get(api.HeaderIndex))
	}
	return i
}

// askAgain sends an acquire by a session already queued for the lock once more, through ep,
// and returns its answer to come. The repeat changes no visible state, so it waits until the
// leader has applied a new entry; the repeat must not be answered meanwhile.
func askAgain(t *testing.T, leader, ep, name, session string) <-chan response {
	t.Helper()
	before := indexHeader(t, do(t, http.MethodGet, leader+"/v1/locks/"+name+"?consistency=stale", nil))
	again := goDo(t.Context(), http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(session, "30s", nil))
	eventually(t, "the repeated acquire is applied", func() string {
		select {
		case r := <-again:
			t.Fatalf("repeated acquire answered while the session waits: %d %s", r.status, short(r.body))
		default:
		}
		if indexHeader(t, do(t, http.MethodGet, leader+"/v1/locks/"+name+"?consistency=stale", nil)) <= before {
			return "no new entry"
		}
		return ""
	})
	pending(t, again, "the repeated acquire")
	return again
}

// metricsPage returns ep's /metrics page, read with plainClient.
func metricsPage(t *testing.T, ep string) []byte {
	t.Helper()
	res, err := plainClient.Get(ep + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
