package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// followerOfOld is a follower whose leader, at addr, runs an older version.
type followerOfOld struct {
	Node
	f    *fsm.FSM
	addr string
}

func (n *followerOfOld) Collector() prometheus.Collector { return noCollector{} }
func (n *followerOfOld) ID() string                      { return "n2" }
func (n *followerOfOld) IsLeader() bool                  { return false }
func (n *followerOfOld) Leader() (string, string)        { return "n1", n.addr }
func (n *followerOfOld) AppliedIndex() uint64            { return n.f.AppliedIndex() }
func (n *followerOfOld) FSM() *fsm.FSM                   { return n.f }
func (n *followerOfOld) ChannelEnabled() bool            { return false }
func (n *followerOfOld) HandleChannel(cluster.ChannelKind, cluster.ChannelHandler) (func(), bool) {
	return func() {}, false
}

// During a rolling upgrade the leader may be of a version that serves no read index: it answers
// the route 404 (or 401 under ACL, before routing). The follower then forwards the read whole,
// as before, and asks that leader for a read index again only after a while.
func TestFollowerForwardsReadsToALeaderWithoutReadIndex(t *testing.T) {
	for _, status := range []int{http.StatusNotFound, http.StatusUnauthorized} {
		var asked, reads atomic.Int64
		old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(api.HeaderForwarded) != "n2" {
				t.Errorf("the follower's request to the leader is not marked forwarded: %s %s", r.Method, r.URL)
			}
			switch r.URL.Path {
			case readIndexPath:
				asked.Add(1)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set(api.HeaderLeader, "n1") // it leads, and says so, as every answer does
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no such route"}}`))
			case "/v1/locks/l":
				reads.Add(1)
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"name":"l","held":true,"session":"s","token":7,"value":"","waiters":0,"modify_index":7}`))
			default:
				t.Errorf("unexpected request to the leader: %s %s", r.Method, r.URL)
			}
		}))
		s := New(&followerOfOld{f: fsm.New(nil), addr: strings.TrimPrefix(old.URL, "http://")}, Config{})
		for i := range 3 {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/locks/l", nil))
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"token":7`) {
				t.Fatalf("leader answering %d: read %d answered %d %s, want the leader's answer", status, i, rec.Code, rec.Body)
			}
		}
		if asked.Load() != 1 || reads.Load() != 3 {
			t.Errorf("leader answering %d: asked for a read index %d times and sent %d reads, want 1 and 3", status, asked.Load(), reads.Load())
		}
		s.Close()
		old.Close()
	}
}

// A 401 from the node a follower took for the leader is passed on only if that node's answer
// names it leader. One that no longer leads (restarted and replaying its log while the others
// still took it for the leader; an older version judges the token before its role) may not
// have applied the token's creation yet: the follower answers 503 no_leader, and the client
// asks again. Forwarded requests and batched renewals alike.
func TestRefusalOfANodeNoLongerLeadingIsNotPassedOn(t *testing.T) {
	for _, tc := range []struct {
		names      string // X-Raftlock-Leader of the refusal
		wantStatus int
		wantCode   string
	}{
		{"n1", http.StatusUnauthorized, api.CodeUnauthorized},
		{"n3", http.StatusServiceUnavailable, api.CodeNoLeader},
		{"", http.StatusServiceUnavailable, api.CodeNoLeader},
	} {
		old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if tc.names != "" {
				w.Header().Set(api.HeaderLeader, tc.names)
			}
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"the token is unknown (never created, or deleted)"}}`))
		}))
		s := New(&followerOfOld{f: fsm.New(nil), addr: strings.TrimPrefix(old.URL, "http://")}, Config{})
		for _, req := range []*http.Request{
			httptest.NewRequest(http.MethodPost, "/v1/sessions", strings.NewReader(`{"ttl":"10s"}`)),
			httptest.NewRequest(http.MethodPut, "/v1/sessions/"+strings.Repeat("ab", 16)+"/renew", nil),
		} {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus || !strings.Contains(rec.Body.String(), `"`+tc.wantCode+`"`) {
				t.Errorf("a refusal naming leader %q: %s %s answered %d %s, want %d %s", tc.names, req.Method, req.URL.Path, rec.Code, rec.Body, tc.wantStatus, tc.wantCode)
			}
		}
		s.Close()
		old.Close()
	}
}
