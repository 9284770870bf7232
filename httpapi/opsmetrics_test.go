package httpapi_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/internal/testkit"
	"github.com/raftlock/raftlock/internal/version"
	"github.com/raftlock/raftlock/tlsutil"
)

// families is one scrape of /metrics.
type families map[string]*dto.MetricFamily

// scrape reads and parses ep's /metrics with c (the plain client if nil).
func scrape(t *testing.T, c *http.Client, ep string) families {
	t.Helper()
	if c == nil {
		c = plainClient
	}
	res, err := c.Get(ep + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", ep, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v", ep, res.StatusCode, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("scrape %s: %v", ep, err)
	}
	return fams
}

// value returns the value of the series of name whose labels include those given (name,
// value pairs), summed over every such series: a counter's or gauge's value, a histogram's
// count. It fails the test if the family or every such series is missing.
func (f families) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	v, ok := f.lookup(name, labels...)
	if !ok {
		t.Fatalf("/metrics has no %s%v", name, labels)
	}
	return v
}

func (f families) lookup(name string, labels ...string) (float64, bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	sum, found := 0.0, false
next:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			if labelOf(m, labels[i]) != labels[i+1] {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, found
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// waitMetric scrapes ep until cond holds for the value of name (with labels), or fails.
func waitMetric(t *testing.T, c *http.Client, ep, what, name string, cond func(float64) bool, labels ...string) {
	t.Helper()
	waitMetricWithin(t, deadline, c, ep, what, name, cond, labels...)
}

// waitMetricWithin is waitMetric with its own deadline.
func waitMetricWithin(t *testing.T, within time.Duration, c *http.Client, ep, what, name string, cond func(float64) bool, labels ...string) {
	t.Helper()
	testkit.Until(t, within, what, func() error {
		v, ok := scrape(t, c, ep).lookup(name, labels...)
		if !ok || !cond(v) {
			return fmt.Errorf("%s%v = %v (present %v)", name, labels, v, ok)
		}
		return nil
	})
}

// withToken sends a token with every request but those whose query says no-token.
type withToken struct{ rt http.RoundTripper }

func (w withToken) RoundTrip(req *http.Request) (*http.Response, error) {
	if !req.URL.Query().Has("no-token") {
		req = req.Clone(req.Context())
		req.Header.Set(api.HeaderToken, "not-a-token")
	}
	return w.rt.RoundTrip(req)
}

func above(x float64) func(float64) bool { return func(v float64) bool { return v > x } }

// The metrics an operator alerts on are on every node's /metrics, and each moves when its
// event happens: a write is appended and fsynced, a leadership transfer counts a leader change
// on every node, a stopped follower's lag and silence grow on the leader and its lag goes back
// to 0 once it is back, a snapshot sets the last snapshot's index and time, a restore counts,
// each limit's refusal counts under its own label, and a removed node says so.
func TestOperatorMetricsMove(t *testing.T) {
	d := ownCluster(t, func(c *config.Config) {
		c.SnapshotThreshold = 16
		c.SnapshotInterval = 100 * time.Millisecond
		c.TrailingLogs = 8
		if c.ID == "n3" {
			c.RateLimit = 1
			c.MaxWatchesPerAddr = 1
		}
	})
	eps := d.Endpoints()
	byID := map[string]int{}
	for i := range d.Size() {
		byID[d.Agent(i).Node().ID()] = i
	}
	limited := eps[byID["n3"]]
	// Writes go through n1 or n2 (forwarded to the leader, which does not limit them).
	writer := eps[byID["n1"]]

	// Present on every node, with the values of a settled cluster.
	leaderEP, _ := roles(t, d)
	for _, ep := range eps {
		f := scrape(t, nil, ep)
		for _, name := range []string{
			"raftlock_raft_leader_changes_total", "raftlock_raft_has_leader", "raftlock_raft_last_contact_seconds",
			"raftlock_raft_apply_lag_entries", "raftlock_raft_last_log_index", "raftlock_log_append_duration_seconds",
			"raftlock_log_fsync_duration_seconds", "raftlock_storage_failures_total", "raftlock_snapshots_total",
			"raftlock_snapshot_last_index", "raftlock_snapshot_last_timestamp_seconds", "raftlock_snapshot_last_size_bytes",
			"raftlock_snapshot_duration_seconds", "raftlock_restores_total", "raftlock_restore_duration_seconds",
			"raftlock_restore_last_size_bytes", "raftlock_recovery_last_timestamp_seconds", "raftlock_node_removed",
			"raftlock_blocking_queries", "raftlock_read_indexes_total",
		} {
			f.value(t, name)
		}
		if v := f.value(t, "raftlock_raft_has_leader"); v != 1 {
			t.Errorf("%s: raftlock_raft_has_leader = %v in a settled cluster", ep, v)
		}
		if v := f.value(t, "raftlock_raft_leader_changes_total"); v < 1 {
			t.Errorf("%s: raftlock_raft_leader_changes_total = %v after an election", ep, v)
		}
		for _, feat := range fsm.AllFeatures() {
			if v := f.value(t, "raftlock_feature_enabled", "feature", string(feat)); v != 1 {
				t.Errorf("%s: raftlock_feature_enabled{feature=%q} = %v in a settled cluster", ep, feat, v)
			}
		}
		if len(f["raftlock_feature_enabled"].GetMetric()) != len(fsm.AllFeatures()) {
			t.Errorf("%s: raftlock_feature_enabled has %d series for %d features", ep, len(f["raftlock_feature_enabled"].GetMetric()), len(fsm.AllFeatures()))
		}
		if v := f.value(t, "raftlock_build_info", "version", version.Version, "goversion", runtime.Version()); v != 1 {
			t.Errorf("%s: raftlock_build_info = %v", ep, v)
		}
		for _, l := range []string{"rate", "connections", "body", "watches", "header"} {
			f.value(t, "raftlock_http_refused_total", "limit", l)
		}
		contact := f.value(t, "raftlock_raft_last_contact_seconds")
		if ep == leaderEP && contact != 0 || ep != leaderEP && contact < 0 {
			t.Errorf("%s (leader %v): raftlock_raft_last_contact_seconds = %v", ep, ep == leaderEP, contact)
		}
		_, hasLag := f.lookup("raftlock_raft_follower_lag_entries")
		if hasLag != (ep == leaderEP) {
			t.Errorf("%s (leader %v): follower lag reported: %v", ep, ep == leaderEP, hasLag)
		}
	}
	leaderF := scrape(t, nil, leaderEP)
	for id, i := range byID {
		if eps[i] != leaderEP {
			leaderF.value(t, "raftlock_raft_follower_lag_entries", "follower", id)
			leaderF.value(t, "raftlock_raft_follower_last_contact_seconds", "follower", id)
		}
	}

	t.Run("writes are appended and fsynced", func(t *testing.T) {
		before := scrape(t, nil, leaderEP)
		session(t, writer)
		waitMetric(t, nil, leaderEP, "an append", "raftlock_log_append_duration_seconds", above(before.value(t, "raftlock_log_append_duration_seconds")))
		waitMetric(t, nil, leaderEP, "an fsync", "raftlock_log_fsync_duration_seconds", above(before.value(t, "raftlock_log_fsync_duration_seconds")))
	})

	t.Run("a snapshot sets the last snapshot", func(t *testing.T) {
		start := float64(time.Now().Unix())
		before := scrape(t, nil, leaderEP)
		s := session(t, writer)
		for range 24 {
			release(t, writer, "snap", s, mustAcquire(t, writer, "snap", s, nil).Token)
		}
		waitMetric(t, nil, leaderEP, "a snapshot", "raftlock_snapshots_total", above(before.value(t, "raftlock_snapshots_total")))
		after := scrape(t, nil, leaderEP)
		if idx := after.value(t, "raftlock_snapshot_last_index"); idx <= before.value(t, "raftlock_snapshot_last_index") {
			t.Errorf("raftlock_snapshot_last_index %v, was %v", idx, before.value(t, "raftlock_snapshot_last_index"))
		}
		if at := after.value(t, "raftlock_snapshot_last_timestamp_seconds"); at < start-1 {
			t.Errorf("raftlock_snapshot_last_timestamp_seconds %v, before the writes %v", at, start)
		}
		if after.value(t, "raftlock_snapshot_last_size_bytes") <= 0 || after.value(t, "raftlock_snapshot_duration_seconds") < 1 {
			t.Errorf("snapshot size %v, durations observed %v", after.value(t, "raftlock_snapshot_last_size_bytes"), after.value(t, "raftlock_snapshot_duration_seconds"))
		}
	})

	t.Run("each limit counts its refusals", func(t *testing.T) {
		refused := func(ep, limit string) float64 {
			return scrape(t, nil, ep).value(t, "raftlock_http_refused_total", "limit", limit)
		}
		// rate: n3 allows 1 write a second, burst 2.
		before := refused(limited, "rate")
		n429 := 0
		for range 6 {
			r := rawDo(http.MethodPost, limited+"/v1/sessions", api.CreateSessionRequest{TTL: "10s"}, nil)
			if r.status == http.StatusTooManyRequests {
				n429++
			}
		}
		if n429 == 0 {
			t.Fatal("6 writes at once to a node allowing 1/s (burst 2) were all accepted")
		}
		if got := refused(limited, "rate") - before; got != float64(n429) {
			t.Errorf("rate refusals counted %v, answered 429 %d times", got, n429)
		}

		// watches: n3 allows one blocking query per address. A probe (wait 0) answers at
		// once if admitted, 429 if not: once the first waits, the probes are refused.
		before = refused(limited, "watches")
		name := lockName(t)
		ctx, cancel := context.WithCancel(context.Background())
		var lk api.Lock
		ok(t, do(t, http.MethodGet, limited+"/v1/locks/"+name, nil), http.StatusOK, &lk)
		// Stale, so that it waits on n3 itself, where raftlock_blocking_queries shows it
		// admitted before the probes start (a probe admitted first would refuse it).
		first := goDo(ctx, http.MethodGet, fmt.Sprintf("%s/v1/locks/%s?index=%d&wait=20s&consistency=stale", limited, name, lk.ModifyIndex), nil)
		waitMetric(t, nil, limited, "the first watch waiting", "raftlock_blocking_queries", func(v float64) bool { return v == 1 })
		n429 = 0
		eventually(t, "a second watch refused", func() string {
			r := rawDo(http.MethodGet, fmt.Sprintf("%s/v1/locks/%s?index=%d&wait=0s", limited, name, lk.ModifyIndex), nil, nil)
			if r.status != http.StatusTooManyRequests {
				select {
				case f := <-first:
					t.Fatalf("the first watch ended: %d %s %v", f.status, short(f.body), f.err)
				default:
				}
				return fmt.Sprintf("a probe: %d %s", r.status, short(r.body))
			}
			n429++
			return ""
		})
		cancel()
		<-first
		if got := refused(limited, "watches") - before; got != float64(n429) {
			t.Errorf("watch refusals counted %v, answered 429 %d times", got, n429)
		}

		// body: over the default 64 KiB.
		before = refused(writer, "body")
		apiError(t, rawDo(http.MethodPost, writer+"/v1/sessions", strings.Repeat(" ", 100<<10)+"{}", nil), http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge)
		if got := refused(writer, "body") - before; got != 1 {
			t.Errorf("body refusals counted %v, want 1", got)
		}

		// header: over the default 8 KiB (net/http allows 4 KiB more).
		before = refused(writer, "header")
		r := rawDo(http.MethodGet, writer+"/v1/health", nil, http.Header{"X-Big": {strings.Repeat("a", 32<<10)}})
		if r.status != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a 32 KiB header: %d %s (err %v)", r.status, short(r.body), r.err)
		}
		waitMetric(t, nil, writer, "the header refusal", "raftlock_http_refused_total", above(before), "limit", "header")
	})

	t.Run("connections, ACL denials and the certificate's expiry", func(t *testing.T) {
		ca, err := tlsutil.NewCA("metrics test", 48*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := ca.Issue(tlsutil.CertRequest{Name: "n1", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, ValidFor: 36 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		srv := httpapi.New(d.Agent(0).Node(), httpapi.Config{ACL: true, MaxConnections: 1, Certificate: func() *tls.Certificate { return &cert }})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		ep := "http://" + ln.Addr().String()
		// One connection, kept, for the scrapes of this test: the server allows one. They carry
		// a token (unknown, but /metrics needs none), since under ACL the connection of a
		// request without one is closed after its answer.
		one := &http.Client{Transport: withToken{&http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}, Timeout: deadline}
		defer one.CloseIdleConnections()
		f := scrape(t, one, ep)
		if got, want := f.value(t, "raftlock_tls_certificate_expiry_timestamp_seconds"), float64(cert.Leaf.NotAfter.Unix()); got != want {
			t.Errorf("raftlock_tls_certificate_expiry_timestamp_seconds = %v, want %v", got, want)
		}
		denied := f.value(t, "raftlock_acl_denied_total", "code", api.CodeUnauthorized)
		res, err := one.Get(ep + "/v1/locks?no-token")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("GET /v1/locks without a token under ACL: %d", res.StatusCode)
		}
		if got := scrape(t, one, ep).value(t, "raftlock_acl_denied_total", "code", api.CodeUnauthorized) - denied; got != 1 {
			t.Errorf("ACL denials counted %v, want 1", got)
		}
		// The tokenless request's connection was closed after its answer: take the one place again.
		before := scrape(t, one, ep).value(t, "raftlock_http_refused_total", "limit", "connections")
		second, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer second.Close()
		waitMetric(t, one, ep, "a connection waiting for a place", "raftlock_http_refused_total", above(before), "limit", "connections")
	})

	t.Run("a leadership transfer counts a leader change on every node", func(t *testing.T) {
		before := map[string]float64{}
		for _, ep := range eps {
			before[ep] = scrape(t, nil, ep).value(t, "raftlock_raft_leader_changes_total")
		}
		ok(t, do(t, http.MethodPost, writer+"/v1/cluster/leadership-transfer", nil), http.StatusOK, nil)
		for _, ep := range eps {
			waitMetric(t, nil, ep, "the leader change seen by "+ep, "raftlock_raft_leader_changes_total", above(before[ep]))
		}
		if err := settle(d); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a stopped follower lags, then catches up", func(t *testing.T) {
		leaderEP, followers := roles(t, d)
		var gone int
		for i, ep := range eps {
			if ep == followers[0] {
				gone = i
			}
		}
		id := d.Agent(gone).Node().ID()
		if err := d.Kill(gone); err != nil {
			t.Fatal(err)
		}
		silent := scrape(t, nil, leaderEP).value(t, "raftlock_raft_follower_last_contact_seconds", "follower", id)
		other := writer
		if other == eps[gone] {
			other = eps[byID["n2"]]
		}
		s := session(t, other)
		for range 5 {
			release(t, other, "lag", s, mustAcquire(t, other, "lag", s, nil).Token)
		}
		waitMetric(t, nil, leaderEP, "the stopped follower's lag", "raftlock_raft_follower_lag_entries", func(v float64) bool { return v >= 10 }, "follower", id)
		waitMetric(t, nil, leaderEP, "the stopped follower's silence", "raftlock_raft_follower_last_contact_seconds", above(silent), "follower", id)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Restart(ctx, gone); err != nil {
			t.Fatal(err)
		}
		waitMetric(t, nil, leaderEP, "the restarted follower catching up", "raftlock_raft_follower_lag_entries", func(v float64) bool { return v == 0 }, "follower", id)
		if err := settle(d); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a restore counts on the node that ran it", func(t *testing.T) {
		total := func() (n, took, size float64) {
			for _, ep := range d.Endpoints() {
				f := scrape(t, nil, ep)
				n += f.value(t, "raftlock_restores_total")
				took += f.value(t, "raftlock_restore_duration_seconds")
				size = max(size, f.value(t, "raftlock_restore_last_size_bytes"))
			}
			return n, took, size
		}
		n0, took0, _ := total()
		saved := do(t, http.MethodGet, writer+"/v1/snapshot", nil)
		if saved.status != http.StatusOK {
			t.Fatalf("save: %d %s", saved.status, short(saved.body))
		}
		r := rawDo(http.MethodPut, writer+"/v1/snapshot", saved.body, http.Header{"Content-Type": {"application/octet-stream"}})
		if r.status != http.StatusOK {
			t.Fatalf("restore: %d %s", r.status, short(r.body))
		}
		n1, took1, size := total()
		if n1 != n0+1 || took1 != took0+1 || size <= 0 {
			t.Errorf("after a restore: restores %v (was %v), durations %v (was %v), size %v", n1, n0, took1, took0, size)
		}
		if err := settle(d); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a removed node says so", func(t *testing.T) {
		leaderEP, followers := roles(t, d)
		var gone string
		for i, ep := range d.Endpoints() {
			if ep == followers[0] {
				gone = d.Agent(i).Node().ID()
			}
		}
		if v := scrape(t, nil, followers[0]).value(t, "raftlock_node_removed"); v != 0 {
			t.Fatalf("raftlock_node_removed = %v before the removal", v)
		}
		ok(t, do(t, http.MethodDelete, leaderEP+"/v1/cluster/members/"+gone, nil), http.StatusOK, nil)
		// It counts itself removed once its configuration has not named it for RemovalGrace
		// (10 election timeouts).
		waitMetricWithin(t, 4*deadline, nil, followers[0], "the removed node's gauge", "raftlock_node_removed", func(v float64) bool { return v == 1 })
	})
}
