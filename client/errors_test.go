package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// onePrefix fails the test unless err reads "raftlock: ..." with the prefix once.
func onePrefix(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "raftlock: ") || strings.Count(msg, "raftlock:") != 1 {
		t.Errorf("%s: %q, want the prefix \"raftlock: \" once, in front", what, msg)
	}
}

// Every error the package returns names the package once, however many of its errors it wraps:
// a refusal from the server under a Lock, an unreachable cluster, a context that ended, a bad
// argument.
func TestErrorsCarryThePackagePrefixOnce(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	sessions := newSessionNode(t, new(atomic.Int32), new(atomic.Int32))
	n := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		if isLockAction(r, "acquire") && held.Load() {
			writeError(w, http.StatusConflict, api.CodeLockHeld, "lock is held", &api.Holder{Session: "s2", Token: 42})
			return true
		}
		return sessions.handler(w, r)
	})
	s := fakeSession(t, n, client.WithTTL(10*time.Second))
	defer s.Close(context.Background())
	ctx := context.Background()

	m := client.NewMutex(s, "jobs/a")
	err := m.TryLock(ctx)
	if !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("TryLock: %v, want ErrLockHeld", err)
	}
	onePrefix(t, "TryLock of a held lock", err)

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = client.NewMutex(s, "jobs/b", client.WithWaitChunk(10*time.Second)).Lock(cctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock past its context: %v", err)
	}
	onePrefix(t, "Lock past its context", err)
	onePrefix(t, "Unlock of a Mutex never locked", client.NewMutex(s, "jobs/c").Unlock(ctx))
	onePrefix(t, "Proclaim without leading", client.NewElection(s, "jobs/d").Proclaim(ctx, "v"))

	dead, err := client.New([]string{deadEndpoint(t), deadEndpoint(t)}, client.WithRetryTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dead.NewSession(ctx)
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("NewSession on an unreachable cluster: %v", err)
	}
	onePrefix(t, "NewSession on an unreachable cluster", err)
	_, err = client.New([]string{"ftp://x"})
	onePrefix(t, "New with a bad endpoint", err)
	onePrefix(t, "a sentinel", client.ErrLockLost)
}

// A session destroyed on the server is reported as destroyed: the server answers alike for an
// expired and a destroyed session, but one that could not have expired yet was destroyed.
func TestSessionGoneBeforeItsDeadlineWasDestroyed(t *testing.T) {
	var mode, renewed atomic.Int32
	n := newSessionNode(t, &mode, &renewed)
	s := fakeSession(t, n, client.WithTTL(10*time.Second))
	m := client.NewMutex(s, "jobs/a")
	mode.Store(int32(renewNotFound))
	// The fake answers acquires with 404 (no route): the request that learns of the loss is
	// the next renewal, a third of the TTL from now, long before the local deadline.
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after session_not_found")
	}
	for what, err := range map[string]error{
		"Session.Err":     s.Err(),
		"Lock":            m.Lock(context.Background()),
		"Campaign":        client.NewElection(s, "jobs/e").Campaign(context.Background(), "v"),
		"Mutex.Context":   context.Cause(m.Context()),
		"Session.Context": context.Cause(s.Context()),
	} {
		if !errors.Is(err, client.ErrSessionNotFound) && what != "Mutex.Context" {
			t.Errorf("%s: %v, want ErrSessionNotFound", what, err)
		}
		onePrefix(t, what, err)
		if what != "Mutex.Context" && !strings.Contains(err.Error(), "session "+s.ID()+" was destroyed") {
			t.Errorf("%s: %q does not say that the session was destroyed", what, err)
		}
	}
	t.Logf("Session.Err: %v", s.Err())
	s.Close(context.Background())
}

// The package makes its errors with errorf (or its error types), which keeps the prefix once;
// an error made with fmt.Errorf or errors.New would add a second one when wrapped.
func TestPackageMakesErrorsWithErrorf(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "errors.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if strings.Contains(line, "fmt.Errorf(") || strings.Contains(line, "errors.New(") {
				t.Errorf("%s:%d: %s: make the error with errorf", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// WithTransport carries every request of the client, so that a process can reach a node
// without a network connection: here the fake node's handler is called in process, for
// endpoints that resolve nowhere.
func TestWithTransportCarriesEveryRequest(t *testing.T) {
	var mode, renewed atomic.Int32
	node := newSessionNode(t, &mode, &renewed)
	var calls atomic.Int32
	inProcess := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		calls.Add(1)
		rec := httptest.NewRecorder()
		node.srv.Config.Handler.ServeHTTP(rec, r)
		return rec.Result(), nil
	})
	c, err := client.New([]string{"http://node-1.invalid", "http://node-2.invalid"}, client.WithTransport(inProcess))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(context.Background(), client.WithTTL(2*time.Second))
	if err != nil {
		t.Fatalf("NewSession through the in-process transport: %v", err)
	}
	waitFor(t, 10*time.Second, "two renewals", func() bool { return renewed.Load() >= 2 })
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if node.count("POST /v1/sessions") != 1 || node.count("DELETE /v1/sessions/"+s.ID()) != 1 || calls.Load() < 4 {
		t.Fatalf("%d requests through the transport; the node saw %v", calls.Load(), node.calls)
	}
	if _, err := client.New([]string{"https://h:1"}, client.WithTransport(inProcess), client.WithTLSConfig(&tls.Config{})); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("WithTransport with WithTLSConfig: %v, want ErrInvalidArgument", err)
	}
}

// roundTripFunc is an http.RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
