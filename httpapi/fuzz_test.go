package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// codeStatus is docs/api.md's table of error codes and their HTTP statuses.
var codeStatus = map[string]int{
	api.CodeInvalidArgument:  http.StatusBadRequest,
	api.CodeUnauthorized:     http.StatusUnauthorized,
	api.CodeForbidden:        http.StatusForbidden,
	api.CodeSessionNotFound:  http.StatusNotFound,
	api.CodeNotFound:         http.StatusNotFound,
	api.CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	api.CodeLockHeld:         http.StatusConflict,
	api.CodeLockDelayed:      http.StatusConflict,
	api.CodeNotHolder:        http.StatusConflict,
	api.CodeAttemptCancelled: http.StatusConflict,
	api.CodeAlreadyExists:    http.StatusConflict,
	api.CodePayloadTooLarge:  http.StatusRequestEntityTooLarge,
	api.CodeTooManyRequests:  http.StatusTooManyRequests,
	api.CodeNoLeader:         http.StatusServiceUnavailable,
	api.CodeTimeout:          http.StatusServiceUnavailable,
}

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete,
	http.MethodPatch, http.MethodHead, http.MethodOptions}

// requestTarget percent-encodes the bytes that may not appear in an HTTP request line, which
// net/http sends as they are in a query (a '?' in the fuzzed path starts one too), and its
// server then refuses in plain text, before any handler runs.
func requestTarget(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '#' {
			fmt.Fprintf(&b, "%%%02X", c)
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

// FuzzRequests sends arbitrary requests to a real cluster: whatever the method, path, query
// and body, the answer is a success or an error of docs/api.md's table with its error body — never
// a 500 (a handler's panic ends there), a stack trace or an HTML page. "{S}" in the path, query
// or body stands for a live session, so that the fuzzer reaches past session_not_found.
// `go test -run - -fuzz FuzzRequests -fuzztime 60s ./httpapi` explores; plain `go test` runs
// the seeds.
func FuzzRequests(f *testing.F) {
	for _, s := range []struct {
		node        uint8
		path, query string
		body        string
	}{
		{1, "/v1/sessions", "", `{"ttl":"10s","name":"fuzz","lock_delay":"1s"}`},
		{1, "/v1/sessions", "", `{"ttl":"10s","ttl":"1h"}`},
		{1, "/v1/sessions", "", `{"ttl":1e400}`},
		{2, "/v1/sessions/{S}/renew", "", ""},
		{1, "/v1/sessions/renew", "", `{"sessions":["{S}","{S}","nope"]}`},
		{0, "/v1/sessions/{S}", "", ""},
		{3, "/v1/sessions/{S}", "", ""},
		{1, "/v1/locks/fuzz/a/acquire", "", `{"session":"{S}","value":"v","attempt":"a-1"}`},
		{1, "/v1/locks/fuzz/a/acquire", "", `{"session":"{S}","wait":"50ms"}`},
		{1, "/v1/locks/fuzz/a/acquire", "", `{"ttl":"5s","wait":"10m1s"}`},
		{3, "/v1/locks/fuzz/a/acquire", "session={S}&attempt=a-1", ""},
		{1, "/v1/locks/fuzz/a/release", "", `{"session":"{S}","token":18446744073709551615}`},
		{1, "/v1/locks/fuzz/a/check", "", `{"token":1}`},
		{0, "/v1/locks/fuzz/a", "consistency=stale", ""},
		{0, "/v1/locks/fuzz/a", "index=1&wait=30ms", ""},
		{0, "/v1/locks", "prefix=fuzz/&index=99999999999&wait=20ms", ""},
		{0, "/v1/locks/%2e%2e/acquire/acquire", "", ""},
		{0, "/v1/cluster", "", ""},
		{1, "/v1/cluster/members", "", `{"id":"","raft_addr":"::::","http_addr":""}`},
		{3, "/v1/cluster/members/n9", "", ""},
		{1, "/v1/cluster/leadership-transfer", "", `{"id":"n7"}`},
		{0, "/metrics", "", ""},
		{4, "/v1/locks/a", "", "\x00\xff"},
	} {
		f.Add(s.node, s.path, s.query, []byte(s.body))
	}
	var once sync.Once
	var live string
	f.Fuzz(func(t *testing.T, node uint8, path, query string, body []byte) {
		d := sharedCluster(t)
		eps := d.Endpoints()
		once.Do(func() { live = session(t, eps[0]) })
		fill := func(s string) string { return strings.ReplaceAll(s, "{S}", live) }
		method := fuzzMethods[int(node)%len(fuzzMethods)]
		url := eps[int(node)/len(fuzzMethods)%len(eps)] + "/" + requestTarget(strings.TrimPrefix(fill(path), "/"))
		if query != "" {
			url += "?" + requestTarget(fill(query))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		r := rawDoCtx(ctx, method, url, []byte(fill(string(body))), nil)
		switch {
		case errors.Is(r.err, context.DeadlineExceeded):
			return // a valid blocking request (an acquire or query with a wait) still waiting
		case r.err != nil && r.status == 0:
			if strings.Contains(r.err.Error(), "invalid") || strings.Contains(r.err.Error(), "malformed") {
				return // the client refused to send it (a URL net/http cannot write)
			}
			t.Fatalf("%s %s: no answer: %v", method, url, r.err)
		}
		if r.status < 400 {
			if r.status >= 300 || r.status < 200 {
				t.Fatalf("%s %s: status %d", method, url, r.status)
			}
			if method != http.MethodHead && len(r.body) > 0 && !json.Valid(r.body) && !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
				t.Fatalf("%s %s: %d with a body that is not JSON: %s", method, url, r.status, short(r.body))
			}
			return
		}
		if method == http.MethodHead {
			return // no body to judge
		}
		var eb api.ErrorBody
		if err := json.Unmarshal(r.body, &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Fatalf("%s %s: status %d without the error body (%v): %s", method, url, r.status, err, short(r.body))
		}
		if want, known := codeStatus[eb.Error.Code]; !known || want != r.status {
			t.Fatalf("%s %s: status %d with code %q, which docs/api.md does not pair: %s", method, url, r.status, eb.Error.Code, short(r.body))
		}
		if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s %s: error with Content-Type %q", method, url, ct)
		}
	})
}
