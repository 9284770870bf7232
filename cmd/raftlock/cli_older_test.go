package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/internal/version"
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

// raftlock snapshot save against a leader of 0.1.0, which has no backup route, says what to
// do instead rather than a bare 404.
func TestSnapshotSaveOnAnOlderLeaderSaysWhatToDo(t *testing.T) {
	srv := olderNode(t)
	r := runAgainst(t, srv.URL, "snapshot", "save", filepath.Join(t.TempDir(), "b.snap"))
	for _, want := range []string{"no such route", "version without backups", "raftlock leader transfer", "data directory of a stopped member"} {
		if r.code != exitFailure || !strings.Contains(r.stderr, want) {
			t.Fatalf("snapshot save against 0.1.0: exit %d, stderr %q does not say %q", r.code, r.stderr, want)
		}
	}
}

// snapshot save --stale saves the state of the node asked, not the leader's: what an
// operator runs against an upgraded member while a member of 0.1.0, without backups, leads.
func TestSnapshotSaveStaleSavesTheNodeAsked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	li, err := cliEnv.dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fi := (li + 1) % cliEnv.dev.Size()
	file := filepath.Join(t.TempDir(), "b.snap")
	r := runAgainst(t, cliEnv.dev.Endpoints()[fi], "snapshot", "save", "--stale", file)
	if r.code != 0 {
		t.Fatalf("snapshot save --stale: exit %d: %s", r.code, r.stderr)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err := backup.Inspect(f)
	if err != nil {
		t.Fatal(err)
	}
	if want := cliEnv.dev.Agent(fi).Node().ID(); sum.Header.Node != want {
		t.Fatalf("the backup was written by %s, not by the node asked (%s)", sum.Header.Node, want)
	}
}

// raftlock status shows each member's version as the member itself says it, also while the
// leader runs 0.1.0, whose GET /v1/cluster names no member's version (before, the column
// showed - for every member then).
func TestStatusAsksEachMemberForItsVersion(t *testing.T) {
	real := cliEnv.dev.Endpoints()
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/cluster" {
			http.NotFound(w, r)
			return
		}
		resp, err := http.Get(real[0] + "/v1/cluster")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var cl api.Cluster
		if err := json.NewDecoder(resp.Body).Decode(&cl); err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		cl.Features = nil
		for i := range cl.Members { // what 0.1.0 answers: no member's version or features
			cl.Members[i].Version, cl.Members[i].Features = "", nil
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(cl)
	}))
	t.Cleanup(leader.Close)
	r := runAgainst(t, leader.URL, "status", "-o", "json")
	if r.code != 0 {
		t.Fatalf("status: exit %d: %s", r.code, r.stderr)
	}
	var out statusOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Members) != cliEnv.dev.Size() {
		t.Fatalf("status shows %d members: %s", len(out.Members), r.stdout)
	}
	for _, m := range out.Members {
		if m.Version != version.Version {
			t.Fatalf("status shows %s's version as %q, want %q (what it says itself)", m.ID, m.Version, version.Version)
		}
	}
}
