package client_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// chunkServer fakes a node whose lock stays held: each waiting acquire is answered 409
// lock_held once its wait (plus late) has passed, or 200 once granted is set. It records when
// each acquire started and ended.
type chunkServer struct {
	late    time.Duration // how long after its wait a request is answered
	granted atomic.Bool

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	starts      []time.Time
	ends        []time.Time
}

func (cs *chunkServer) handle(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/acquire") {
		return false
	}
	var req api.AcquireRequest
	if err := decodeStrict(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, err.Error(), nil)
		return true
	}
	wait, _ := time.ParseDuration(req.Wait)
	cs.mu.Lock()
	cs.inFlight++
	cs.maxInFlight = max(cs.maxInFlight, cs.inFlight)
	cs.starts = append(cs.starts, time.Now())
	cs.mu.Unlock()
	defer func() {
		cs.mu.Lock()
		cs.inFlight--
		cs.ends = append(cs.ends, time.Now())
		cs.mu.Unlock()
	}()
	deadline := time.After(wait + cs.late)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if cs.granted.Load() {
			writeJSON(w, http.StatusOK, api.AcquireResponse{Name: "l", Session: req.Session, Token: 7})
			return true
		}
		select {
		case <-deadline:
			writeError(w, http.StatusConflict, api.CodeLockHeld, "held", &api.Holder{Session: "x", Token: 3})
			return true
		case <-r.Context().Done():
			return true
		case <-tick.C:
		}
	}
}

// lockThroughChunks runs Lock with 400ms chunks (handed over 100ms early) against cs until cs has seen n acquires, then
// grants the lock, and checks how the acquires overlapped.
func lockThroughChunks(t *testing.T, cs *chunkServer, n int) {
	t.Helper()
	sessions := newSessionNode(t, new(atomic.Int32), new(atomic.Int32))
	node := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		return cs.handle(w, r) || sessions.handler(w, r)
	})
	s := fakeSession(t, node, client.WithTTL(10*time.Second))
	m := client.NewMutex(s, "l", client.WithWaitChunk(400*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Lock(ctx) }()
	testkit.Eventually(t, 15*time.Second, "acquires through several chunks", func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return len(cs.starts) >= n
	})
	cs.granted.Store(true)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m.Token() != 7 {
		t.Fatalf("token %d, want 7", m.Token())
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.maxInFlight != 2 {
		t.Fatalf("at most %d acquires in flight at once, want 2 (one waiting, one taking over)", cs.maxInFlight)
	}
	// Each request began before the one before it was answered: the server never lacked a
	// waiting request of the session, so it never dropped its queue entry.
	for i := 0; i+1 < len(cs.starts) && i < len(cs.ends); i++ {
		if !cs.starts[i+1].Before(cs.ends[i]) {
			t.Fatalf("acquire %d began %v after acquire %d ended", i+1, cs.starts[i+1].Sub(cs.ends[i]), i)
		}
	}
}

func TestLockSendsEachChunkBeforeThePreviousEnds(t *testing.T) {
	lockThroughChunks(t, &chunkServer{}, 6)
}

func TestLockWithASlowServerKeepsAtMostOneSpareRequest(t *testing.T) {
	// Answers come 250ms after each 400ms wait: past the 100ms lead, so the next chunk is due
	// while two requests are still in flight, and must wait for one to end.
	cs := &chunkServer{late: 250 * time.Millisecond}
	lockThroughChunks(t, cs, 6)
}
