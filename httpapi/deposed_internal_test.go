package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// deposedLeader is a node that believes it leads but has been deposed without knowing it yet:
// its state lacks what its successor did (a session created there), and confirming its
// leadership fails. Only the methods the session paths call are implemented.
type deposedLeader struct {
	Node
	f        *fsm.FSM
	deposed  bool // whether confirming the leadership fails
	barriers int
}

// Collector exports no node metrics.
func (d *deposedLeader) Collector() prometheus.Collector { return noCollector{} }

type noCollector struct{}

func (noCollector) Describe(chan<- *prometheus.Desc) {}
func (noCollector) Collect(chan<- prometheus.Metric) {}

func (d *deposedLeader) ID() string               { return "n1" }
func (d *deposedLeader) IsLeader() bool           { return true }
func (d *deposedLeader) Leader() (string, string) { return "n1", "127.0.0.1:1" }
func (d *deposedLeader) AppliedIndex() uint64     { return d.f.AppliedIndex() }
func (d *deposedLeader) FSM() *fsm.FSM            { return d.f }

// HandleChannel serves no peer channel: the stand-in has no peers.
func (d *deposedLeader) HandleChannel(cluster.ChannelKind, cluster.ChannelHandler) (func(), bool) {
	return func() {}, false
}
func (d *deposedLeader) ResolveToken(secret string) (fsm.ACLToken, fsm.Authorizer, bool) {
	tok := fsm.ACLToken{AccessorID: "acc", Policies: []string{fsm.ManagementPolicy}}
	return tok, fsm.NewAuthorizer([]fsm.Policy{{Name: fsm.ManagementPolicy}}), secret == "s"
}
func (d *deposedLeader) ReadBarrier(context.Context) error {
	d.barriers++
	if d.deposed {
		return fmt.Errorf("%w: deposed", cluster.ErrNotLeader)
	}
	return nil
}

// Under ACLs a request naming a session checks, on the leader, that the caller owns it. A
// deposed leader that does not know it yet may lack a session created through the new leader:
// its answer must not be 404 (which a client takes as final, dropping a live session), but
// the failure to confirm its leadership. A leader that confirms it answers 404.
func TestSessionAbsenceIsAnsweredOnlyByAConfirmedLeader(t *testing.T) {
	id := fsm.SessionID{1}
	paths := []struct{ method, path, body string }{
		{http.MethodPut, "/v1/sessions/" + id.String() + "/renew", ""},
		{http.MethodDelete, "/v1/sessions/" + id.String(), ""},
		{http.MethodPost, "/v1/locks/l/acquire", `{"session":"` + id.String() + `"}`},
		{http.MethodPost, "/v1/locks/l/release", `{"session":"` + id.String() + `","token":1}`},
	}
	for _, deposed := range []bool{true, false} {
		node := &deposedLeader{f: fsm.New(nil), deposed: deposed}
		s := New(node, Config{ACL: true})
		for _, p := range paths {
			req := httptest.NewRequest(p.method, p.path, strings.NewReader(p.body))
			req.Header.Set(api.HeaderToken, "s")
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			want, code := http.StatusNotFound, api.CodeSessionNotFound
			if deposed {
				want, code = http.StatusServiceUnavailable, api.CodeNoLeader
			}
			if rec.Code != want || !strings.Contains(rec.Body.String(), `"`+code+`"`) {
				t.Errorf("deposed=%v %s %s: %d %s, want %d %s", deposed, p.method, p.path, rec.Code, rec.Body, want, code)
			}
		}
		if node.barriers != len(paths) {
			t.Errorf("deposed=%v: %d leadership confirmations for %d requests", deposed, node.barriers, len(paths))
		}
	}
}
