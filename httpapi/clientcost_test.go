package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// What a client that chooses its own method, path and headers can cost the node.

// plainClient sends requests the spec does not describe (invented methods): it is not checked
// against docs/openapi.yaml.
var plainClient = &http.Client{Timeout: 30 * time.Second}

// metricSeries returns the series of the request-latency histogram on /metrics (its _count
// lines) and the size of the whole page.
func metricSeries(t *testing.T, ep string) (series []string, size int) {
	t.Helper()
	res, err := plainClient.Get(ep + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "raftlock_http_request_duration_seconds_count{") {
			series = append(series, line)
		}
	}
	return series, len(b)
}

// Invented methods and paths, sent without a token, add no series to /metrics: a method the API
// does not serve is labelled "other", a path by its route.
func TestMetricsLabelsAreBounded(t *testing.T) {
	for _, acl := range []bool{false, true} {
		ep := sharedCluster(t).Endpoints()[0]
		if acl {
			ep = aclCluster(t)[1]
		}
		before, sizeBefore := metricSeries(t, ep)
		const n = 300
		for i := range n {
			method := fmt.Sprintf("M%d%s", i, strings.Repeat("X", 200))
			path := fmt.Sprintf("/v1/%d/%s", i, strings.Repeat("p", 100))
			if i%3 == 0 {
				path = fmt.Sprintf("/v1/locks/%d", i)
			}
			req, err := http.NewRequest(method, ep+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			res, err := plainClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method[:8], path, err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		after, sizeAfter := metricSeries(t, ep)
		for _, s := range after {
			if strings.Contains(s, "XXXX") || strings.Contains(s, "pppp") {
				t.Fatalf("acl %v: a series carries a label the client chose: %.200s", acl, s)
			}
		}
		// A few new series at most (an "other" method, the codes of the answers).
		if grown := len(after) - len(before); grown > 20 {
			t.Fatalf("acl %v: %d requests with invented methods and paths added %d series (%d to %d bytes of /metrics)",
				acl, n, grown, sizeBefore, sizeAfter)
		}
		t.Logf("acl %v: %d series before, %d after; /metrics %d -> %d bytes", acl, len(before), len(after), sizeBefore, sizeAfter)
	}
}
