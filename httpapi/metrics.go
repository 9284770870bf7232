package httpapi

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/raftlock/raftlock/api"
)

// metrics is one node's Prometheus registry: its own, so that several nodes can live in one
// process (raftlock dev, tests).
type metrics struct {
	reg *prometheus.Registry
	// own are the node's raftlock_* collectors, all of reg but Go's and the process's.
	own     []prometheus.Collector
	latency *prometheus.HistogramVec
	// blocking counts the blocking queries waiting on this node.
	blocking prometheus.Gauge
	// tlsRefused counts API connections whose TLS handshake failed.
	tlsRefused prometheus.Counter
	// forwarded counts requests this node passed on to the leader.
	forwarded prometheus.Counter
	// followerReads counts linearizable reads this follower answered itself; readIndexRounds
	// the read indexes it asked the leader for, each shared by the reads waiting then.
	followerReads, readIndexRounds prometheus.Counter
	// forwardedVia counts the forwards by the way they took: the peer channel or HTTP.
	forwardedVia *prometheus.CounterVec
	// refused counts requests refused by a limit of this node, by limit (refusedLimits).
	refused *prometheus.CounterVec
	// aclDenied counts requests the ACLs refused, by the error code of the answer.
	aclDenied *prometheus.CounterVec
}

// The limits whose refusals raftlock_http_refused_total counts, each its own label value.
const (
	limitRate        = "rate"        // --rate-limit: 429
	limitConnections = "connections" // --max-connections: a connection waited for a free place
	limitBody        = "body"        // --max-body-bytes, --max-snapshot-bytes: 413
	limitWatches     = "watches"     // --max-watches-per-token, --max-watches-per-address: 429
	limitHeader      = "header"      // --max-header-bytes: 431
)

// refusedLimits are every value of the limit label.
var refusedLimits = []string{limitRate, limitConnections, limitBody, limitWatches, limitHeader}

func newMetrics(node Node, cfg Config) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "raftlock_http_request_duration_seconds",
		Help:    "Latency of HTTP requests by route, method and status code.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"route", "method", "code"})
	m.blocking = prometheus.NewGauge(prometheus.GaugeOpts{Name: "raftlock_blocking_queries",
		Help: "Blocking queries (GET with ?index) waiting on this node for a change."})
	m.tlsRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlock_http_tls_refused_total",
		Help: "API connections closed because their TLS handshake failed (plain HTTP, untrusted or missing client certificate)."})
	m.forwarded = prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlock_http_forwarded_requests_total",
		Help: "Requests this node received as a follower and forwarded to the leader (clients that send them to the leader save the hop)."})
	m.followerReads = prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlock_http_follower_reads_total",
		Help: "Linearizable reads this node answered itself as a follower, after learning a read index from the leader, instead of forwarding them."})
	m.readIndexRounds = prometheus.NewCounter(prometheus.CounterOpts{Name: "raftlock_http_read_index_rounds_total",
		Help: "Read indexes this follower asked the leader for; each serves every linearizable read waiting here when it began."})
	m.forwardedVia = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raftlock_http_forwarded_via_total",
		Help: "Requests this node forwarded to the leader, by the way they took: channel (the peer channel on the Raft port) or http (a second HTTP request, for what the channel does not carry or while the cluster has not enabled it)."}, []string{"via"})
	for _, v := range []string{viaChannel, viaHTTP} {
		m.forwardedVia.WithLabelValues(v)
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raftlock_http_refused_total",
		Help: "Requests (or connections) refused by a limit of this node: rate (429), connections (waited for a place), body (413), watches (429), header (431)."}, []string{"limit"})
	for _, l := range refusedLimits {
		m.refused.WithLabelValues(l)
	}
	m.aclDenied = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "raftlock_acl_denied_total",
		Help: "Requests the ACLs refused: unauthorized (no token, or one unknown) or forbidden (the token's policies do not allow it)."}, []string{"code"})
	for _, c := range []string{api.CodeUnauthorized, api.CodeForbidden} {
		m.aclDenied.WithLabelValues(c)
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "raftlock_build_info",
		Help:        "Always 1: the labels say which raftlock this node runs (version, git revision, Go version).",
		ConstLabels: prometheus.Labels{"version": orUnknown(cfg.Version), "revision": orUnknown(buildRevision(cfg.Commit)), "goversion": runtime.Version()}})
	build.Set(1)
	m.own = []prometheus.Collector{build, m.refused, m.aclDenied, node.Collector()}
	if cert := certificateOf(cfg); cert != nil {
		m.own = append(m.own, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "raftlock_tls_certificate_expiry_timestamp_seconds",
			Help: "Unix time this node's TLS certificate expires (the one it serves now, reloads included)."}, func() float64 {
			if leaf := leafOf(cert()); leaf != nil {
				return float64(leaf.NotAfter.Unix())
			}
			return 0
		}))
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	status := func() (leader bool, term, commit, applied float64) {
		st, err := node.Status()
		if err != nil {
			return false, 0, 0, 0
		}
		return st.State == "Leader", float64(st.Term), float64(st.CommitIndex), float64(st.AppliedIndex)
	}
	m.own = append(m.own,
		m.latency,
		m.blocking,
		m.tlsRefused,
		m.forwarded,
		m.followerReads,
		m.readIndexRounds,
		m.forwardedVia,
		gauge("raftlock_raft_leader", "1 if this node is the Raft leader, else 0.", func() float64 {
			if l, _, _, _ := status(); l {
				return 1
			}
			return 0
		}),
		gauge("raftlock_raft_term", "Current Raft term.", func() float64 { _, t, _, _ := status(); return t }),
		gauge("raftlock_raft_commit_index", "Raft commit index known to this node.", func() float64 { _, _, c, _ := status(); return c }),
		gauge("raftlock_raft_applied_index", "Last Raft index applied by this node.", func() float64 { return float64(node.AppliedIndex()) }),
		gauge("raftlock_sessions", "Live sessions.", func() float64 { return float64(node.FSM().Stats().Sessions) }),
		gauge("raftlock_locks_held", "Locks currently held.", func() float64 { return float64(node.FSM().Stats().Held) }),
		gauge("raftlock_waiters", "Queued acquire requests across all locks.", func() float64 { return float64(node.FSM().Stats().Waiters) }),
		gauge("raftlock_session_timers", "Session expiry timers run by this node (the leader).", func() float64 { return float64(node.SessionTimers()) }),
		counter("raftlock_grants_total", "Lock grants applied by this node since it started.", func() float64 { return float64(node.Counters().Grants) }),
		counter("raftlock_releases_total", "Lock releases (including by session end) applied since start.", func() float64 { return float64(node.Counters().Releases) }),
		counter("raftlock_session_expiries_total", "Session expiries applied since start.", func() float64 { return float64(node.Counters().Expiries) }),
		counter("raftlock_raft_tls_refused_total", "Incoming Raft connections closed because their TLS handshake failed (no node certificate of the CA).", func() float64 { return float64(node.Counters().RaftTLSRefused) }),
	)
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.own...)
	return m
}

// RegisterMetrics registers the node's raftlock_* metrics (those of /metrics but Go's and the
// process's, which a program's registry has already) in r as well, for a program that embeds
// the node and serves its own metrics. It registers all or none. Nodes that share a registry
// each need a label of their own (prometheus.WrapRegistererWith).
func (s *Server) RegisterMetrics(r prometheus.Registerer) error {
	for i, c := range s.metrics.own {
		if err := r.Register(c); err != nil {
			for _, done := range s.metrics.own[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("httpapi: registering the node's metrics: %w", err)
		}
	}
	return nil
}

// UnregisterMetrics takes back what RegisterMetrics registered in r.
func (s *Server) UnregisterMetrics(r prometheus.Registerer) {
	for _, c := range s.metrics.own {
		r.Unregister(c)
	}
}

// refuse counts a request refused by limit (one of refusedLimits).
func (m *metrics) refuse(limit string) { m.refused.WithLabelValues(limit).Inc() }

// counted counts, from the error answer a handler or middleware gave, a refusal by the body
// limit or by the ACLs: every such answer passes through the error handler.
func (m *metrics) counted(code string) {
	switch code {
	case api.CodePayloadTooLarge:
		m.refuse(limitBody)
	case api.CodeUnauthorized, api.CodeForbidden:
		m.aclDenied.WithLabelValues(code).Inc()
	}
}

// buildRevision is commit, or when empty the git revision Go recorded in the binary ("-dirty"
// if the work tree had changes), or "".
func buildRevision(commit string) string {
	if commit != "" {
		return commit
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && rev != "" {
		rev += "-dirty"
	}
	return rev
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// certificateOf returns how to read the certificate the API serves: Config.Certificate, else
// the first of the TLS configuration's; nil without TLS.
func certificateOf(cfg Config) func() *tls.Certificate {
	switch {
	case cfg.Certificate != nil:
		return cfg.Certificate
	case cfg.TLS != nil && len(cfg.TLS.Certificates) > 0:
		c := &cfg.TLS.Certificates[0]
		return func() *tls.Certificate { return c }
	}
	return nil
}

// leafOf returns the parsed leaf certificate of c, or nil.
func leafOf(c *tls.Certificate) *x509.Certificate {
	if c == nil || len(c.Certificate) == 0 {
		return nil
	}
	if c.Leaf != nil {
		return c.Leaf
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		return nil
	}
	return leaf
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// middleware records the latency of every request under labels the client cannot choose: the
// route pattern (never the raw path, which would give each lock name its own series), one of
// the methods the API serves (any other is "other") and the status code, which the node
// chooses. So the series stay bounded whatever a client sends.
func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // write the error now, so the status code is known
			err = nil
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		m.latency.WithLabelValues(route, methodLabel(c.Request().Method), strconv.Itoa(c.Response().Status)).Observe(time.Since(start).Seconds())
		return err
	}
}

// methodLabel is the method's metrics label: itself for a method the API serves, "other" for
// anything else a client may send (a method is any token up to the header limit).
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions:
		return method
	}
	return "other"
}
