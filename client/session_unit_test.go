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

// renewMode tells a fake session node how to answer renewals.
type renewMode int32

const (
	renewOK renewMode = iota
	renewHang
	renewNotFound
)

// newSessionNode fakes the session endpoints; renewals answer as mode says.
func newSessionNode(t *testing.T, mode *atomic.Int32, renewed *atomic.Int32) *fakeNode {
	return newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/sessions":
			var req api.CreateSessionRequest
			if err := decodeStrict(r, &req); err != nil {
				writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, err.Error(), nil)
				return true
			}
			writeJSON(w, http.StatusCreated, api.Session{ID: strings.Repeat("ab", 16), TTL: req.TTL})
		case r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/renew"):
			switch renewMode(mode.Load()) {
			case renewHang:
				<-r.Context().Done()
				return true
			case renewNotFound:
				writeError(w, http.StatusNotFound, api.CodeSessionNotFound, "session expired", nil)
				return true
			}
			renewed.Add(1)
			writeJSON(w, http.StatusOK, api.RenewResponse{ID: strings.Repeat("ab", 16), TTL: "2s"})
		case r.Method == http.MethodDelete:
			writeJSON(w, http.StatusOK, api.DestroyResponse{Released: []string{}})
		default:
			return false
		}
		return true
	})
}

// fakeSession creates a session with a 2s TTL (unless opts say otherwise) on fake node n.
func fakeSession(t *testing.T, n *fakeNode, opts ...client.SessionOption) *client.Session {
	t.Helper()
	c, err := client.New([]string{n.URL()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.NewSession(context.Background(), append([]client.SessionOption{client.WithTTL(2 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSessionDeadlinePassesBeforeServerCouldExpire(t *testing.T) {
	var mode, renewed atomic.Int32
	n := newSessionNode(t, &mode, &renewed)
	var danger atomic.Bool
	ttl := 2 * time.Second
	s := fakeSession(t, n, client.WithOnDanger(func(time.Duration) { danger.Store(true) }))
	defer s.Close(context.Background())
	waitFor(t, 5*time.Second, "a renewal", func() bool { return renewed.Load() > 0 })

	// From now on renewals get no answer. The server would expire the session no earlier
	// than TTL after the last renewal it received, which was sent after lastSent.
	mode.Store(int32(renewHang))
	select {
	case <-s.Done():
	case <-time.After(2 * ttl):
		t.Fatal("Done not closed while renewals hang")
	}
	closed := time.Now()
	lastSent := s.Deadline().Add(-(ttl - ttl/5)) // the default margin is TTL/5
	if !closed.Before(lastSent.Add(ttl)) {
		t.Fatalf("Done closed %s after the earliest server expiry", closed.Sub(lastSent.Add(ttl)))
	}
	if !errors.Is(s.Err(), client.ErrSessionDeadline) {
		t.Fatalf("Err = %v, want ErrSessionDeadline", s.Err())
	}
	if !danger.Load() {
		t.Fatal("the danger callback was not called")
	}
}

func TestSessionReportsServerExpiry(t *testing.T) {
	var mode, renewed atomic.Int32
	mode.Store(int32(renewNotFound))
	n := newSessionNode(t, &mode, &renewed)
	s := fakeSession(t, n)
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after session_not_found")
	}
	if !errors.Is(s.Err(), client.ErrSessionNotFound) || errors.Is(s.Err(), client.ErrSessionDeadline) {
		t.Fatalf("Err = %v, want ErrSessionNotFound", s.Err())
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if !errors.Is(s.Err(), client.ErrSessionNotFound) {
		t.Fatalf("Close replaced the reason: %v", s.Err())
	}
}

func TestSessionCloseDestroysAndClosesDone(t *testing.T) {
	var mode, renewed atomic.Int32
	n := newSessionNode(t, &mode, &renewed)
	s := fakeSession(t, n)
	if s.Err() != nil {
		t.Fatalf("new session: Err = %v", s.Err())
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	if !errors.Is(s.Err(), client.ErrSessionClosed) {
		t.Fatalf("Err = %v, want ErrSessionClosed", s.Err())
	}
	if n.count("DELETE /v1/sessions/"+s.ID()) != 1 {
		t.Fatal("Close did not destroy the session")
	}
}

// A server without POST /v1/sessions/renew (API v1 does not require it) is asked once, then
// renewals go one by one.
func TestSessionRenewsOneByOneWithoutBatchEndpoint(t *testing.T) {
	var mode, renewed atomic.Int32
	n := newSessionNode(t, &mode, &renewed)
	s := fakeSession(t, n)
	defer s.Close(context.Background())
	waitFor(t, 5*time.Second, "three renewals", func() bool { return renewed.Load() >= 3 })
	if s.Err() != nil {
		t.Fatalf("Err = %v", s.Err())
	}
	if got := n.count("POST /v1/sessions/renew"); got != 1 {
		t.Fatalf("the batch endpoint was asked %d times, want once", got)
	}
}
