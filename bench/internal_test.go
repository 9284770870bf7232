package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestSummarizePercentiles(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	if l.Count != 100 || l.P50 != 50 || l.P99 != 99 || l.Max != 100 || l.Mean != 50.5 {
		t.Errorf("summarize = %+v", l)
	}
	if (summarize(nil) != Latency{}) {
		t.Error("empty input should give a zero summary")
	}
	if l := summarize([]time.Duration{3 * time.Millisecond}); l.P50 != 3 || l.P99 != 3 {
		t.Errorf("one sample = %+v", l)
	}
}

func TestMonitorFlagsOverlapsAndRegressions(t *testing.T) {
	m := newMonitor()
	m.grant(0, 10)
	m.release(0)
	m.grant(1, 12)
	m.release(1)
	if m.overlaps != 0 || m.tokenRegressions != 0 {
		t.Fatalf("clean history flagged: %v", m.violations)
	}
	m.grant(2, 14)
	m.grant(3, 15) // client 2 has not released
	if m.overlaps != 1 {
		t.Errorf("overlap not flagged: %v", m.violations)
	}
	m.release(3)
	m.release(2)
	m.grant(0, 13) // lower than 15
	if m.tokenRegressions != 1 {
		t.Errorf("token regression not flagged: %v", m.violations)
	}
	m.release(0)
	m.grant(1, 15) // equal: no two grants share a token
	if m.tokenRegressions != 2 {
		t.Errorf("repeated token not flagged: %v", m.violations)
	}
	if !strings.Contains(strings.Join(m.violations, "\n"), "OVERLAP") {
		t.Errorf("violations = %v", m.violations)
	}
}

func TestAnalyzeContended(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	w := window{start: at(0), end: at(1000)}
	// Two clients alternate; the second grant arrives 1ms before the release ack (handoff 0).
	holds := []hold{
		{client: 1, token: 20, asked: at(5), granted: at(20), releaseSent: at(21), releaseAcked: at(23)},
		{client: 0, token: 10, asked: at(0), granted: at(10), releaseSent: at(11), releaseAcked: at(14)},
		{client: 0, token: 30, asked: at(15), granted: at(22), releaseSent: at(24), releaseAcked: at(26)},
	}
	res := ContendedResult{Clients: 2}
	res.analyze(holds, w)
	if res.Grants != 3 || res.GrantsPerSec != 3 {
		t.Errorf("grants = %d (%v/s)", res.Grants, res.GrantsPerSec)
	}
	if res.Handoff.Count != 2 || res.Handoff.Max != 6 || res.GrantsBeforeAck != 1 {
		t.Errorf("handoff = %+v, before ack %d", res.Handoff, res.GrantsBeforeAck)
	}
	if res.HandoffFromSend.Max != 9 || res.HandoffFromSend.P50 != 1 {
		t.Errorf("handoff from send = %+v", res.HandoffFromSend)
	}
	if res.MinGrants != 1 || res.MaxGrants != 2 || res.Fairness != 2 {
		t.Errorf("fairness = %d..%d (%v)", res.MinGrants, res.MaxGrants, res.Fairness)
	}
	if res.FIFOInversions != 0 {
		t.Errorf("inversions = %d", res.FIFOInversions)
	}
}

func TestFIFOInversions(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	inOrder := []hold{{token: 1, asked: at(0)}, {token: 2, asked: at(1)}, {token: 3, asked: at(2)}}
	if n := fifoInversions(inOrder, 5*time.Millisecond); n != 0 {
		t.Errorf("in order: %d inversions", n)
	}
	// Token 2 went to a client that asked 20ms after the one granted token 3.
	jumped := []hold{{token: 1, asked: at(0)}, {token: 2, asked: at(30)}, {token: 3, asked: at(10)}}
	if n := fifoInversions(jumped, 5*time.Millisecond); n != 1 {
		t.Errorf("jumped: %d inversions, want 1", n)
	}
	// Within the slack, requests may reach the server in either order.
	near := []hold{{token: 1, asked: at(3)}, {token: 2, asked: at(0)}}
	if n := fifoInversions(near, 5*time.Millisecond); n != 0 {
		t.Errorf("within slack: %d inversions", n)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 12.5
process_resident_memory_bytes 7.5e+07
raftlock_http_request_duration_seconds_bucket{route="/v1/sessions",le="0.001"} 3
raftlock_sessions 42
garbage
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m[metricCPU] != 12.5 || m[metricRSS] != 7.5e7 || m[metricSessions] != 42 || len(m) != 3 {
		t.Errorf("parsed %v", m)
	}
}

func TestWindow(t *testing.T) {
	w := newWindow(100*time.Millisecond, time.Second)
	if w.measuring(time.Now()) || w.over(time.Now()) {
		t.Error("warm-up counted")
	}
	if !w.measuring(w.start) || w.measuring(w.end) || !w.over(w.end) || w.seconds() != 1 {
		t.Error("window bounds")
	}
	if got := windowStatus("x", w, w.start.Add(500*time.Millisecond), 50, "ops"); !strings.Contains(got, "100/s") {
		t.Errorf("status = %q", got)
	}
}

// TestTraceWriteRecordsTheFirstWrite checks that a request made with traceWrite's context
// records when it was written, and only the first time: a retry keeps the first write, the
// one that may have queued the session.
func TestTraceWriteRecordsTheFirstWrite(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var wrote atomic.Int64
	ctx := traceWrite(context.Background(), &wrote)
	get := func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	before := time.Now().UnixNano()
	get()
	first, after := wrote.Load(), time.Now().UnixNano()
	if first < before || first > after {
		t.Errorf("write recorded at %d, want within the request (%d to %d)", first, before, after)
	}
	get()
	if w := wrote.Load(); w != first {
		t.Errorf("a second request moved the write from %d to %d", first, w)
	}
}

// The semaphore and read/write monitors flag a grant over the limit, a writer beside another
// holder, a reader beside a writer and a token granted twice, and nothing else.
func TestKindMonitorFlagsWhatMustNotHappen(t *testing.T) {
	sem := newKindMonitor(2)
	sem.grant(0, 1, false)
	sem.grant(1, 2, false)
	sem.release(false)
	sem.grant(2, 3, false)
	if sem.bad != 0 || sem.dups != 0 || sem.most != 2 {
		t.Fatalf("within the limit: %+v", sem)
	}
	sem.grant(3, 3, false)
	if sem.bad != 1 || sem.dups != 1 || len(sem.violations) != 2 {
		t.Fatalf("over the limit, a token twice: %+v", sem)
	}
	rw := newKindMonitor(0)
	rw.grant(0, 1, false)
	rw.grant(1, 2, false)
	rw.release(false)
	rw.release(false)
	rw.grant(2, 3, true)
	if rw.bad != 0 || rw.most != 2 {
		t.Fatalf("readers, then a writer alone: %+v", rw)
	}
	rw.grant(3, 4, false)
	rw.release(false)
	rw.grant(4, 5, true)
	if rw.bad != 2 {
		t.Fatalf("a reader and a writer beside a writer: %+v", rw)
	}
}
