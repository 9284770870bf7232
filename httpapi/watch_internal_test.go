package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// deposedWatched is a leader deposed while a watch waits on it: confirming its leadership
// fails, and it applies nothing new, so its change log stays silent.
type deposedWatched struct {
	deposedLeader
}

func (d *deposedWatched) WatchPrefix(string) <-chan struct{} { return make(chan struct{}) }
func (d *deposedWatched) Changes(_ string, after uint64, _ int) cluster.Changes {
	return cluster.Changes{Next: after}
}

// A leader deposed during a linearizable watch must not answer "no change" when the wait
// ends: a newer leader may have changed the prefix. It confirms its leadership once the wait
// is over, and fails; a stale watch answers from what it has.
func TestWatchOnADeposedLeaderFails(t *testing.T) {
	for _, stale := range []bool{false, true} {
		node := &deposedWatched{deposedLeader{f: fsm.New(nil), deposed: true}}
		s := New(node, Config{})
		q := "/v1/locks?prefix=p/&index=7&wait=50ms"
		if stale {
			q += "&consistency=stale"
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, q, nil))
		want, body := http.StatusServiceUnavailable, `"`+api.CodeNoLeader+`"`
		if stale {
			want, body = http.StatusOK, `"index":7`
		}
		if rec.Code != want || !strings.Contains(rec.Body.String(), body) {
			t.Errorf("stale=%v: %d %s, want %d with %s", stale, rec.Code, rec.Body, want, body)
		}
		if wantBarriers := map[bool]int{false: 1, true: 0}[stale]; node.barriers != wantBarriers {
			t.Errorf("stale=%v: %d leadership confirmations, want %d", stale, node.barriers, wantBarriers)
		}
	}
}

// changedWatched is a node whose change log has one change under every prefix.
type changedWatched struct {
	deposedLeader
	asked chan struct{} // closed at the first call of Changes
	once  sync.Once
}

func (d *changedWatched) WatchPrefix(string) <-chan struct{} { return make(chan struct{}) }
func (d *changedWatched) Changes(prefix string, after uint64, _ int) cluster.Changes {
	d.once.Do(func() { close(d.asked) })
	return cluster.Changes{Locks: []fsm.LockView{{LockInfo: fsm.LockInfo{Name: prefix + "a", ModifyIndex: after + 1}}}, Next: after + 1}
}

// A node answers a bounded number of woken watches at once; the others wait for a turn, so that
// thousands woken by one change do not starve Raft of the CPU.
func TestWatchAnswersWaitForATurn(t *testing.T) {
	node := &changedWatched{deposedLeader: deposedLeader{f: fsm.New(nil)}, asked: make(chan struct{})}
	s := New(node, Config{})
	for range cap(s.answering) {
		s.answering <- struct{}{}
	}
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/locks?prefix=p/&index=7&consistency=stale", nil))
		done <- rec
	}()
	<-node.asked
	select {
	case rec := <-done:
		t.Fatalf("answered while every turn was taken: %d %s", rec.Code, rec.Body)
	case <-time.After(300 * time.Millisecond): // an absence cannot be awaited
	}
	<-s.answering
	select {
	case rec := <-done:
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"p/a"`) {
			t.Fatalf("answer %d %s", rec.Code, rec.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not answered once a turn was free")
	}
}
