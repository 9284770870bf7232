package client_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

func TestFailoverPastDeadAndLeaderlessNodes(t *testing.T) {
	leaderless := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		writeError(w, http.StatusServiceUnavailable, api.CodeNoLeader, "no leader", nil)
		return true
	})
	good := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		writeJSON(w, http.StatusOK, api.Lock{Name: "a", Held: true, Token: 7})
		return true
	})
	c, err := client.New([]string{deadEndpoint(t), leaderless.URL(), good.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.GetLock(context.Background(), "a")
	if err != nil {
		t.Fatalf("GetLock: %v", err)
	}
	if l.Token != 7 {
		t.Fatalf("token %d, want 7", l.Token)
	}
	if leaderless.count("GET /v1/locks/a") == 0 {
		t.Fatal("the leaderless node was never asked")
	}
	// The client now sticks to the node that answered.
	if _, err := c.GetLock(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if n := leaderless.count("GET /v1/locks/a"); n != 1 {
		t.Fatalf("leaderless node asked %d times, want 1", n)
	}
}

func TestUnreachableClusterGivesUpAfterRetryTimeout(t *testing.T) {
	c, err := client.New([]string{deadEndpoint(t), deadEndpoint(t)},
		client.WithRetryTimeout(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = c.Raw().Cluster(context.Background())
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("gave up after %s", d)
	}
}

func TestAPIErrorCarriesHolder(t *testing.T) {
	n := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		if !isLockAction(r, "acquire") {
			return false
		}
		writeError(w, http.StatusConflict, api.CodeLockHeld, "lock is held",
			&api.Holder{Session: "s2", Token: 42})
		return true
	})
	c, _ := client.New([]string{n.URL()})
	_, err := c.Raw().Acquire(context.Background(), "jobs/a", api.AcquireRequest{Session: "s1"})
	if !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("err = %v, want ErrLockHeld", err)
	}
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Holder == nil || ae.Holder.Token != 42 || ae.StatusCode != 409 {
		t.Fatalf("err = %#v, want an APIError naming holder s2 with token 42", err)
	}
	if errors.Is(err, client.ErrNotHolder) {
		t.Fatal("lock_held matches ErrNotHolder")
	}
}

func TestReleaseWithUnknownOutcomeReadsTheLock(t *testing.T) {
	var releases atomic.Int32
	var stillHeld atomic.Bool
	stillHeld.Store(true)
	n := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case isLockAction(r, "release"):
			if releases.Add(1) == 1 {
				// The first release times out but, as the read shows, is not applied.
				writeError(w, http.StatusServiceUnavailable, api.CodeTimeout, "commit timed out", nil)
				return true
			}
			stillHeld.Store(false)
			writeJSON(w, http.StatusOK, api.ReleaseResponse{Released: true})
		case r.Method == http.MethodGet && r.URL.Path == "/v1/locks/a":
			writeJSON(w, http.StatusOK, api.Lock{Name: "a", Held: stillHeld.Load(), Session: "s1", Token: 5})
		default:
			return false
		}
		return true
	})
	c, _ := client.New([]string{n.URL()})
	if err := c.Raw().Release(context.Background(), "a", "s1", 5); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := releases.Load(); got != 2 {
		t.Fatalf("%d release requests, want 2 (asked again after reading the lock still held)", got)
	}
	if n.count("GET /v1/locks/a") != 1 {
		t.Fatal("the lock was not read after the unknown outcome")
	}
}

func TestReleaseTimeoutThatWasAppliedIsSuccess(t *testing.T) {
	var releases atomic.Int32
	n := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case isLockAction(r, "release"):
			releases.Add(1)
			writeError(w, http.StatusServiceUnavailable, api.CodeTimeout, "commit timed out", nil)
		case r.Method == http.MethodGet:
			// The release was applied: a waiter got the lock with a new token.
			writeJSON(w, http.StatusOK, api.Lock{Name: "a", Held: true, Session: "s2", Token: 9})
		default:
			return false
		}
		return true
	})
	c, _ := client.New([]string{n.URL()})
	if err := c.Raw().Release(context.Background(), "a", "s1", 5); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if releases.Load() != 1 {
		t.Fatalf("%d release requests, want 1", releases.Load())
	}
}

func TestNewRejectsBadEndpoints(t *testing.T) {
	if _, err := client.New(nil); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("no endpoints: err = %v", err)
	}
	if _, err := client.New([]string{"ftp://x"}); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("ftp endpoint: err = %v", err)
	}
	c, err := client.New([]string{"127.0.0.1:7001/", " http://h:1 "})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Endpoints()
	if got[0] != "http://127.0.0.1:7001" || got[1] != "http://h:1" {
		t.Fatalf("endpoints %q", got)
	}
}
