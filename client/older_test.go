package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// acquireBefore is the acquire body of a version from before features (0.1.0): it knows
// neither a limit nor a mode, and refuses them as unknown fields, as its strict decoder did.
type acquireBefore struct {
	Session string  `json:"session,omitempty"`
	TTL     string  `json:"ttl,omitempty"`
	Wait    string  `json:"wait,omitempty"`
	Value   *string `json:"value,omitempty"`
	Attempt string  `json:"attempt,omitempty"`
}

// refusingNode is a fake node whose acquires answer as refuse says; its sessions work.
func refusingNode(t *testing.T, refuse func(w http.ResponseWriter, r *http.Request)) *client.Session {
	t.Helper()
	sessions := newSessionNode(t, new(atomic.Int32), new(atomic.Int32))
	node := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		if isLockAction(r, "acquire") {
			refuse(w, r)
			return true
		}
		if isLockAction(r, "release") || isLockAction(r, "cancel") {
			writeJSON(w, http.StatusOK, api.ReleaseResponse{})
			return true
		}
		return sessions.handler(w, r)
	})
	s := fakeSession(t, node, client.WithTTL(10*time.Second))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// A Semaphore or a shared RLock on a cluster that does not support them yet fails at once
// with ErrFeatureNotEnabled, saying that the cluster does not support this yet, whether an
// upgraded leader refuses it (409 feature_not_enabled) or an old one (0.1.0) refuses the
// field it does not know (400 unknown field "limit"). Before, the old leader's answer was a
// bare invalid argument, and a blocking RLock against the new one retried until its
// context ended.
func TestWhatTheClusterDoesNotSupportYetFailsAtOnceAndSaysSo(t *testing.T) {
	older := func(w http.ResponseWriter, r *http.Request) {
		var req acquireBefore
		if err := decodeStrict(r, &req); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalidArgument,
				"malformed request body: "+strings.TrimPrefix(err.Error(), "json: "), nil)
			return
		}
		writeJSON(w, http.StatusOK, api.AcquireResponse{Name: "l", Session: req.Session, Token: 7})
	}
	gated := func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusConflict, api.CodeFeatureNotEnabled,
			`cluster: feature not enabled in this cluster yet: feature "semaphores-rwlocks" not enabled: a member lacks it: member n3 (version "0.2.0") does not support it; upgrade every member first`, nil)
	}
	for _, tc := range []struct {
		name    string
		refuse  func(http.ResponseWriter, *http.Request)
		acquire func(ctx context.Context, s *client.Session) error
	}{
		{"semaphore, old leader", older, func(ctx context.Context, s *client.Session) error {
			return client.NewSemaphore(s, "jobs/sem", 2).Acquire(ctx)
		}},
		{"semaphore try, old leader", older, func(ctx context.Context, s *client.Session) error {
			return client.NewSemaphore(s, "jobs/sem", 2).TryAcquire(ctx)
		}},
		{"shared, old leader", older, func(ctx context.Context, s *client.Session) error {
			return client.NewRWMutex(s, "docs/rw").RLock(ctx)
		}},
		{"semaphore, leader without the feature", gated, func(ctx context.Context, s *client.Session) error {
			return client.NewSemaphore(s, "jobs/sem", 2).Acquire(ctx)
		}},
		{"shared, leader without the feature", gated, func(ctx context.Context, s *client.Session) error {
			return client.NewRWMutex(s, "docs/rw").RLock(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := refusingNode(t, tc.refuse)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := tc.acquire(ctx, s)
			if ctx.Err() != nil {
				t.Fatalf("still trying when its context ended: %v", err)
			}
			if !errors.Is(err, client.ErrFeatureNotEnabled) {
				t.Fatalf("got %v, want ErrFeatureNotEnabled", err)
			}
			if !strings.Contains(err.Error(), "the cluster does not support this yet") {
				t.Fatalf("%q does not say that the cluster does not support this yet", err)
			}
		})
	}
}

// Another invalid argument is not taken for an older version.
func TestAnInvalidArgumentIsNotAMissingFeature(t *testing.T) {
	s := refusingNode(t, func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, "value: at most 4096 bytes", nil)
	})
	err := client.NewSemaphore(s, "jobs/sem", 2).TryAcquire(context.Background())
	if !errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrFeatureNotEnabled) {
		t.Fatalf("got %v, want ErrInvalidArgument only", err)
	}
}
