package client_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// gateNode is a fake node whose cluster enables attempt-numbers when the test moves its gate,
// and says on every answer how many features it has enabled (X-Raftlock-Features). It
// records the attempt fields of every acquire.
type gateNode struct {
	moved       atomic.Bool // attempt-numbers enabled
	readsFail   atomic.Bool // GET /v1/cluster fails, as during an election
	noHeader    bool        // answers as a server from before X-Raftlock-Features
	mu          sync.Mutex
	acquires    []api.AcquireRequest
	clusterRead atomic.Int32
}

func (g *gateNode) handle(w http.ResponseWriter, r *http.Request) bool {
	if !g.noHeader {
		n := 0
		if g.moved.Load() {
			n = 1
		}
		w.Header().Set(api.HeaderFeatures, strconv.Itoa(n))
	}
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/cluster":
		g.clusterRead.Add(1)
		if g.readsFail.Load() {
			writeError(w, http.StatusServiceUnavailable, api.CodeNoLeader, "electing", nil)
			return true
		}
		cl := api.Cluster{Features: []string{}}
		if g.moved.Load() {
			cl.Features = []string{"attempt-numbers"}
		}
		writeJSON(w, http.StatusOK, cl)
	case isLockAction(r, "acquire"):
		var req api.AcquireRequest
		if err := decodeStrict(r, &req); err != nil {
			writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, err.Error(), nil)
			return true
		}
		g.mu.Lock()
		g.acquires = append(g.acquires, req)
		token := uint64(len(g.acquires))
		g.mu.Unlock()
		writeJSON(w, http.StatusOK, api.AcquireResponse{Name: "l", Session: req.Session, Token: token})
	case isLockAction(r, "release"):
		writeJSON(w, http.StatusOK, api.ReleaseResponse{})
	default:
		return false
	}
	return true
}

// session starts a session (TTL 10 s) on a fake node whose locks g serves, and whose sessions
// newSessionNode serves.
func (g *gateNode) session(t *testing.T) *client.Session {
	t.Helper()
	sessions := newSessionNode(t, new(atomic.Int32), new(atomic.Int32))
	node := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		return g.handle(w, r) || sessions.handler(w, r)
	})
	return fakeSession(t, node, client.WithTTL(10*time.Second))
}

// last returns the attempt fields of the last acquire.
func (g *gateNode) last() api.AcquireRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.acquires[len(g.acquires)-1]
}

// cycle runs one Lock/Unlock of m.
func cycle(ctx context.Context, t *testing.T, m *client.Mutex) {
	t.Helper()
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A client that started before its cluster numbered attempts numbers its tries all the same,
// in the string form "~N" that every version accepts, learns that the gate moved from the
// first answer that says so (without a restart, and without waiting 30 s), and from then on
// carries them numbered, with a floor that covers every try before: a late request of a try
// begun under the old rules is then refused. Once it has seen the feature, a failed read of
// the cluster's features (an election) does not take it back to the old form.
func TestClientLearnsThatTheGateMovedAndKeepsIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := &gateNode{}
	s := g.session(t)
	defer s.Client().Close()
	m := client.NewMutex(s, "l")

	cycle(ctx, t, m)
	if a := g.last(); a.Attempt != "~1" || a.AttemptSeq != 0 || a.AttemptFloor != 0 {
		t.Fatalf("first try before the gate: attempt %q seq %d floor %d, want \"~1\" alone", a.Attempt, a.AttemptSeq, a.AttemptFloor)
	}
	cycle(ctx, t, m)
	if a := g.last(); a.Attempt != "~2" {
		t.Fatalf("second try before the gate: attempt %q, want \"~2\"", a.Attempt)
	}
	g.moved.Store(true)
	cycle(ctx, t, m) // its answers say the gate moved
	cycle(ctx, t, m)
	if a := g.last(); a.Attempt != "" || a.AttemptSeq != 4 || a.AttemptFloor != 4 {
		t.Fatalf("try after the gate moved: attempt %q seq %d floor %d, want seq 4 floor 4", a.Attempt, a.AttemptSeq, a.AttemptFloor)
	}
	g.readsFail.Store(true)
	s2, err := s.Client().NewSession(ctx, client.WithTTL(10*time.Second)) // reads the features again
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(ctx)
	cycle(ctx, t, client.NewMutex(s2, "l"))
	if a := g.last(); a.AttemptSeq != 1 || a.Attempt != "" {
		t.Fatalf("try while the features cannot be read: attempt %q seq %d, want numbered", a.Attempt, a.AttemptSeq)
	}
}

// Against a server that does not say how many features it has enabled, the client reads
// them again at most every 30 s while it lacks one: a Lock does not cost a read each.
func TestClientDoesNotReadFeaturesOnEveryTry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := &gateNode{noHeader: true}
	s := g.session(t)
	defer s.Client().Close()
	m := client.NewMutex(s, "l")
	for range 5 {
		cycle(ctx, t, m)
	}
	if n := g.clusterRead.Load(); n != 1 {
		t.Fatalf("%d reads of the cluster's features, want 1", n)
	}
	if a := g.last(); !strings.HasPrefix(a.Attempt, "~") {
		t.Fatalf("attempt %q, want the string form", a.Attempt)
	}
}

// A TryLock whose first request was refused but whose answer was lost, and whose retry is
// then refused attempt_cancelled (the server ended the refused try's attempt), fails as a
// TryLock of a lock not to be had: with an error that matches ErrLockHeld.
func TestTryLockRetryAfterALostRefusalReportsTheLockHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var acquires atomic.Int32
	sessions := newSessionNode(t, new(atomic.Int32), new(atomic.Int32))
	node := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		if !isLockAction(r, "acquire") {
			if r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/acquire") {
				writeJSON(w, http.StatusOK, api.CancelAcquireResponse{})
				return true
			}
			return sessions.handler(w, r)
		}
		if acquires.Add(1) == 1 {
			// Refused, but the answer never reaches the client: the connection drops.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return true
		}
		writeError(w, http.StatusConflict, api.CodeAttemptCancelled, "this attempt was cancelled", nil)
		return true
	})
	s := fakeSession(t, node, client.WithTTL(10*time.Second))
	defer s.Client().Close()
	err := client.NewMutex(s, "l").TryLock(ctx)
	if !errors.Is(err, client.ErrLockHeld) || acquires.Load() != 2 {
		t.Fatalf("TryLock after %d acquires: %v, want an error matching ErrLockHeld after 2", acquires.Load(), err)
	}
}

// Likewise a Proclaim: its retry refused attempt_cancelled means an earlier request of it was
// refused (the leadership was lost), so the leadership ends.
func TestProclaimRetryAfterALostRefusalEndsTheLeadership(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var acquires atomic.Int32
	sessions := newSessionNode(t, new(atomic.Int32), new(atomic.Int32))
	node := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		switch {
		case isLockAction(r, "release"):
			writeError(w, http.StatusConflict, api.CodeNotHolder, "not the holder", nil)
			return true
		case r.Method == http.MethodDelete && strings.HasSuffix(r.URL.Path, "/acquire"):
			writeJSON(w, http.StatusOK, api.CancelAcquireResponse{})
			return true
		case !isLockAction(r, "acquire"):
			return sessions.handler(w, r)
		}
		switch acquires.Add(1) {
		case 1: // the campaign
			writeJSON(w, http.StatusOK, api.AcquireResponse{Name: "e", Token: 7})
		case 2: // the proclamation, refused, its answer lost
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			writeError(w, http.StatusConflict, api.CodeAttemptCancelled, "this attempt was cancelled", nil)
		}
		return true
	})
	s := fakeSession(t, node, client.WithTTL(10*time.Second))
	defer s.Client().Close()
	e := client.NewElection(s, "e")
	if err := e.Campaign(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	err := e.Proclaim(ctx, "b")
	if !errors.Is(err, client.ErrLockLost) || !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("Proclaim: %v, want the leadership lost", err)
	}
}
