package httpapi_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// Renewals that reach a follower together go to the leader in a few batches, not one forward
// each, and each caller gets its own session's answer, as a single renewal answers it: the
// session's TTL, or 404 session_not_found for a session that does not exist (never created,
// or destroyed). A renewal answered 503 (a leader change on a busy machine) is sent again, as
// a client would, and counts again.
func TestFollowerBatchesRenewals(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	f := followers[0]
	const n = 48
	ids := make([]string, n)
	ttls := make([]string, n)
	for i := range n {
		ttls[i] = fmt.Sprintf("%ds", 20+i%3)
		ids[i] = createSession(t, leader, api.CreateSessionRequest{TTL: ttls[i]}).ID
	}
	gone := createSession(t, leader, api.CreateSessionRequest{TTL: "30s"}).ID
	ok(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+gone, nil), http.StatusOK, nil)
	never := fmt.Sprintf("%032x", 12345)
	before := metricValue(t, f, "raftlock_http_forwarded_requests_total")
	type call struct {
		id, ttl string // ttl "" for a session that does not exist
	}
	var calls []call
	for i := range n {
		calls = append(calls, call{ids[i], ttls[i]})
	}
	calls = append(calls, call{gone, ""}, call{never, ""}, call{ids[0], ttls[0]}) // and one twice
	var wg sync.WaitGroup
	var sent atomic.Int64
	start := make(chan struct{})
	answers := make([]response, len(calls))
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for end := time.Now().Add(deadline); ; {
				sent.Add(1)
				answers[i] = rawDo(http.MethodPut, f+"/v1/sessions/"+c.id+"/renew", nil, nil)
				if answers[i].status != http.StatusServiceUnavailable || time.Now().After(end) {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, c := range calls {
		r := answers[i]
		if c.ttl == "" {
			apiError(t, r, http.StatusNotFound, api.CodeSessionNotFound)
			continue
		}
		var rr api.RenewResponse
		ok(t, r, http.StatusOK, &rr)
		if rr.ID != c.id || rr.TTL != c.ttl {
			t.Errorf("renewal of %s answered %+v, want its own id and TTL %s", c.id, rr, c.ttl)
		}
	}
	forwards := metricValue(t, f, "raftlock_http_forwarded_requests_total") - before
	renewals := sent.Load()
	if forwards < 1 || forwards > float64(renewals/3) {
		t.Fatalf("%d renewals sent at once to a follower made %v forwards, want between 1 and %d", renewals, forwards, renewals/3)
	}
	t.Logf("%d renewals, %v forwards", renewals, forwards)
}
