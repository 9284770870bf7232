package client_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/raftlock/raftlock/api"
)

// fakeNode is a scripted HTTP server standing in for one raftlock node, for tests of the
// client's own logic (failover, error mapping, deadlines) without a cluster.
type fakeNode struct {
	srv *httptest.Server

	mu      sync.Mutex
	calls   map[string]int // "METHOD path" -> count
	handler func(w http.ResponseWriter, r *http.Request) bool
}

// newFakeNode starts a fake node; handler answers requests and returns false for a 404.
func newFakeNode(t *testing.T, handler func(w http.ResponseWriter, r *http.Request) bool) *fakeNode {
	t.Helper()
	f := &fakeNode{calls: map[string]int{}, handler: handler}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.calls[r.Method+" "+r.URL.Path]++
		f.mu.Unlock()
		if !f.handler(w, r) {
			writeError(w, http.StatusNotFound, api.CodeNotFound, "no such route", nil)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeNode) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[key]
}

func (f *fakeNode) URL() string { return f.srv.URL }

// deadEndpoint returns the URL of a port nobody listens on.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string, holder *api.Holder) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "0")
	}
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg}, Holder: holder})
}

func isLockAction(r *http.Request, action string) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/locks/") &&
		strings.HasSuffix(r.URL.Path, "/"+action)
}
