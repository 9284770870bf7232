package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
