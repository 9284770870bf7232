package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// olderNode stands in for a node of 0.1.0, from before features: its sessions work, and its
// acquire decodes strictly a body without "limit" or "mode", as that version did.
func olderNode(t *testing.T) *httptest.Server {
	t.Helper()
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions":
			reply(w, http.StatusCreated, api.Session{ID: strings.Repeat("ab", 16), TTL: "10s"})
		case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/renew"):
			reply(w, http.StatusOK, api.RenewResponse{ID: strings.Repeat("ab", 16), TTL: "10s"})
		case r.Method == http.MethodDelete:
			reply(w, http.StatusOK, api.DestroyResponse{Released: []string{}})
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/acquire"):
			var req struct {
				Session string  `json:"session,omitempty"`
				TTL     string  `json:"ttl,omitempty"`
				Wait    string  `json:"wait,omitempty"`
				Value   *string `json:"value,omitempty"`
				Attempt string  `json:"attempt,omitempty"`
			}
			dec := json.NewDecoder(r.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&req); err != nil {
				reply(w, http.StatusBadRequest, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeInvalidArgument,
					Message: "malformed request body: " + strings.TrimPrefix(err.Error(), "json: ")}})
				return
			}
			reply(w, http.StatusOK, api.AcquireResponse{Name: "x", Session: req.Session, Token: 7})
		default:
			reply(w, http.StatusNotFound, api.ErrorBody{Error: api.ErrorDetail{Code: api.CodeNotFound,
				Message: "no such route: " + r.Method + " " + r.URL.Path}})
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// runAgainst runs the binary against endpoint.
func runAgainst(t *testing.T, endpoint string, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliEnv.bin, args...)
	cmd.Env = append(os.Environ(), endpointsEnv+"="+endpoint)
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return finish(t, cmd, &stdout, &stderr, 60*time.Second)
}

// raftlock lock --limit or --shared against a leader of 0.1.0, which answers 400 unknown
// field, says that the cluster does not support it yet, at once, even with --wait.
func TestLockWithALimitOnAnOlderClusterSaysItIsNotSupportedYet(t *testing.T) {
	srv := olderNode(t)
	for _, args := range [][]string{
		{"lock", "--limit", "2", "jobs/x", "--", "true"},
		{"lock", "--limit", "2", "--wait", "-1s", "jobs/x", "--", "true"},
		{"lock", "--shared", "--wait", "-1s", "jobs/x", "--", "true"},
	} {
		r := runAgainst(t, srv.URL, args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "the cluster does not support") {
			t.Fatalf("raftlock %s against 0.1.0: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}
