package httpapi_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// What a client that chooses its own method, path and headers can cost the node.

// plainClient sends requests the spec does not describe (invented methods): it is not checked
// against docs/openapi.yaml.
var plainClient = &http.Client{Timeout: 30 * time.Second}

// metricSeries returns the series of the request-latency histogram on /metrics (its _count
// lines) and the size of the whole page.
func metricSeries(t *testing.T, ep string) (series []string, size int) {
	t.Helper()
	b := metricsPage(t, ep)
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

// A restore's body (PUT /v1/snapshot) is exempt from the body limits, not from time: a request
// refused from its headers (no token, a token without management) is answered and its
// connection closed at once, however slowly the client sends what is left of the body; an
// authorised restore whose body stops arriving is cut off after --body-read-timeout. At the
// leader and at a follower, which streams the body on.
func TestSlowRestoreBodyIsCutOff(t *testing.T) {
	const interval = 8 * time.Second
	d, root := ownACLCluster(t, t.TempDir(), &syncBuffer{}, func(c *config.Config) { c.BodyReadTimeout = interval })
	leader, followers := roles(t, d)
	var p api.Policy
	ok(t, doAs(t, root, http.MethodPost, leader+"/v1/acl/policies", api.Policy{Name: "reader", Operator: "read"}), http.StatusOK, &p)
	var narrow api.NewToken
	ok(t, doAs(t, root, http.MethodPost, leader+"/v1/acl/tokens", api.CreateTokenRequest{Description: "narrow", Policies: []string{"reader"}}), http.StatusOK, &narrow)
	r := doAs(t, root, http.MethodGet, leader+"/v1/snapshot", nil)
	if r.status != http.StatusOK || len(r.body) < 64 {
		t.Fatalf("a backup: %d, %d bytes", r.status, len(r.body))
	}
	backupStart := string(r.body[:32])

	// drip sends a byte every 200ms on c until stop closes or the connection fails.
	drip := func(c net.Conn, chunked bool) (stop func()) {
		done := make(chan struct{})
		go func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				b := []byte("x")
				if chunked {
					b = []byte("1\r\nx\r\n")
				}
				if _, err := c.Write(b); err != nil {
					return
				}
			}
		}()
		return func() { close(done) }
	}
	for _, ep := range []string{leader, followers[0]} {
		for _, tc := range []struct {
			name, token string
			chunked     bool
			status      int
		}{
			{"no token", "", false, http.StatusUnauthorized},
			{"no token, chunked", "", true, http.StatusUnauthorized},
			{"a token without management", narrow.SecretID, false, http.StatusForbidden},
			{"a token without management, chunked", narrow.SecretID, true, http.StatusForbidden},
		} {
			head := "PUT /v1/snapshot HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
			if tc.token != "" {
				head += "X-Raftlock-Token: " + tc.token + "\r\n"
			}
			body := backupStart
			if tc.chunked {
				head += "Transfer-Encoding: chunked\r\n\r\n"
				body = fmt.Sprintf("%x\r\n%s\r\n", len(backupStart), backupStart)
			} else {
				head += "Content-Length: 100000\r\n\r\n"
			}
			c, rd := rawRequest(t, ep, head, body)
			stop := drip(c, tc.chunked)
			res, got, took := readAnswer(t, c, rd, interval/2)
			if res.StatusCode != tc.status || !strings.Contains(string(got), `"error"`) {
				t.Fatalf("%s, %s: %s %s, want %d", ep, tc.name, res.Status, got, tc.status)
			}
			// Closed at once: well before the body's deadline, while the client still sends.
			if !closedWithin(c, rd, interval/2) {
				stop()
				t.Fatalf("%s, %s: the connection of a refused restore stayed open while its body trickled in", ep, tc.name)
			}
			stop()
			t.Logf("%s, %s: answered %d in %v, and closed", ep, tc.name, res.StatusCode, took)
		}
	}

	// An authorised restore whose body stops: cut off after the interval, nothing changed.
	for _, ep := range []string{leader, followers[0]} {
		head := "PUT /v1/snapshot HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nX-Raftlock-Token: " + root + "\r\nContent-Length: 100000\r\n\r\n"
		c, rd := rawRequest(t, ep, head, backupStart)
		stop := drip(c, false) // a byte every 200ms: far under the least pace
		res, got, took := readAnswer(t, c, rd, 3*interval)
		stop()
		if res.StatusCode < 400 || !strings.Contains(string(got), `"error"`) {
			t.Fatalf("%s: a stalled restore answered %s %s", ep, res.Status, got)
		}
		if !closedWithin(c, rd, interval) {
			t.Fatalf("%s kept the connection of a stalled restore open", ep)
		}
		t.Logf("%s cut a stalled restore off after %v: %s %s", ep, took, res.Status, got)
	}
	// Nothing was restored: the root token still works, the narrow one is still there.
	ok(t, doAs(t, narrow.SecretID, http.MethodGet, leader+"/v1/cluster", nil), http.StatusOK, nil)
}

// A request whose headers are over --max-header-bytes (a 32 KiB token, say) is answered 431
// with the API's JSON error body, and its connection closed; so is a malformed request line
// (400). The limit, and the memory it bounds, stay the HTTP server's own.
func TestHugeHeaderGetsTheJSONErrorBody(t *testing.T) {
	eps := aclCluster(t)
	for _, ep := range []string{eps[0], eps[1]} {
		for _, size := range []int{32 << 10, 1 << 20} {
			head := "GET /v1/cluster HTTP/1.1\r\nHost: x\r\nX-Raftlock-Token: " + strings.Repeat("t", size) + "\r\n\r\n"
			c, rd := rawRequest(t, ep, "", "")
			go func() { _, _ = io.WriteString(c, head) }() // the node stops reading past its limit
			res, body, _ := readAnswer(t, c, rd, 10*time.Second)
			apiError(t, response{status: res.StatusCode, header: res.Header, body: body}, http.StatusRequestHeaderFieldsTooLarge, api.CodeHeaderTooLarge)
			if !closedWithin(c, rd, 5*time.Second) {
				t.Fatalf("%s: the connection of a %d-byte header stayed open", ep, size)
			}
		}
		c, rd := rawRequest(t, ep, "GET /v1/cluster HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "")
		res, body, _ := readAnswer(t, c, rd, 10*time.Second)
		apiError(t, response{status: res.StatusCode, header: res.Header, body: body}, http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

// plainDo sends a request that the spec does not describe (an internal header) with
// plainClient.
func plainDo(method, url string, hdr http.Header) response {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return response{err: err}
	}
	req.Header = hdr
	return exchange(plainClient, req)
}
