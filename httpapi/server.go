package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tlsutil"
)

// Node is what the API needs from a cluster node. *cluster.Node is its only implementation, and
// the handlers are tested against real clusters on 127.0.0.1; the interface is here for the
// few paths a real cluster cannot be made to take on demand (a leader deposed without knowing
// it yet), which tests drive through a stand-in. It is one interface, not one per handler
// group: every group needs the node's identity, leadership and ACLs, so the split would
// repeat those methods in each.
type Node interface {
	ID() string
	IsLeader() bool
	Leader() (id, httpAddr string)
	AppliedIndex() uint64
	Ready(ctx context.Context) bool
	NotReady(ctx context.Context) string
	FeatureGate() string
	FSM() *fsm.FSM
	Status() (cluster.Status, error)
	Counters() cluster.Counters
	SessionTimers() int
	SessionLease(id fsm.SessionID) (cluster.SessionLease, bool)
	Collector() prometheus.Collector

	CreateOwnedSession(ctx context.Context, owner, name string, ttl, lockDelay time.Duration) (fsm.SessionInfo, error)
	DestroySession(ctx context.Context, id fsm.SessionID) ([]string, error)
	Renew(ctx context.Context, id fsm.SessionID) (time.Duration, error)
	RenewMany(ctx context.Context, ids []fsm.SessionID) ([]cluster.RenewResult, error)
	Acquire(ctx context.Context, req cluster.AcquireRequest) (fsm.Result, error)
	CancelAcquire(ctx context.Context, session fsm.SessionID, lock string, attempt cluster.Attempt) (fsm.Result, error)
	Release(ctx context.Context, session fsm.SessionID, lock string, token uint64, attempt cluster.Attempt) (fsm.Result, error)
	ForceRelease(ctx context.Context, lock string, token uint64, session fsm.SessionID) (fsm.Result, error)
	DelayLeft(name string, until int64) time.Duration
	ReadBarrier(ctx context.Context) error
	ReadIndex(ctx context.Context) (uint64, error)
	LeaderReadIndex(ctx context.Context) (uint64, error)
	WaitApplied(ctx context.Context, index uint64) error
	WatchLock(name string) <-chan struct{}
	WatchPrefix(prefix string) <-chan struct{}
	WatchViews() <-chan struct{}
	Changes(prefix string, after uint64, limit int) cluster.Changes
	// LeaderContact and ElectionTimeout (with WaitApplied) serve the streamed watches.
	LeaderContact() time.Time
	ElectionTimeout() time.Duration
	AddMember(ctx context.Context, id, raftAddr, httpAddr string) error
	AddNonvoter(ctx context.Context, id, raftAddr, httpAddr string) error
	PromoteMember(ctx context.Context, id string) error
	VoterWarning() string
	RemoveMember(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) error
	IsRemoved() bool
	OwnSuffrage() string
	MemberView(id string) (suffrage string, started bool)
	WriteBackup(ctx context.Context, w io.Writer) (backup.Header, error)
	RestoreBackup(ctx context.Context, r io.Reader, opts cluster.RestoreOptions) (cluster.RestoreResult, error)

	ChannelEnabled() bool
	CallLeader(ctx context.Context, kind cluster.ChannelKind, payload []byte) (string, []byte, error)
	HandleChannel(kind cluster.ChannelKind, h cluster.ChannelHandler) (stop func(), ok bool)

	ResolveToken(secret string) (fsm.ACLToken, fsm.Authorizer, bool)
	ACLBootstrap(ctx context.Context) (cluster.NewACLToken, error)
	CreateACLToken(ctx context.Context, description string, policies []string) (cluster.NewACLToken, error)
	DeleteACLToken(ctx context.Context, accessor string) error
	SetACLPolicy(ctx context.Context, p fsm.Policy, createOnly bool) (fsm.Policy, error)
	DeleteACLPolicy(ctx context.Context, name string) error
}

var _ Node = (*cluster.Node)(nil)

// Config configures a Server.
type Config struct {
	// Version is reported by GET /v1/cluster.
	Version string
	// Commit is the git revision of the build, for raftlock_build_info; empty reads the one Go
	// recorded in the binary.
	Commit string
	// Certificate, if set, returns the certificate the API serves now (it may be reloaded),
	// for raftlock_tls_certificate_expiry_timestamp_seconds; with TLS and without it, the
	// first of TLS.Certificates counts.
	Certificate func() *tls.Certificate
	// MaxBodyBytes bounds request bodies; default 64 KiB.
	MaxBodyBytes int64
	// MaxSnapshotBytes bounds the body of a restore (PUT /v1/snapshot), a backup file, which
	// streams through to the leader instead of being read first; default 1 GiB.
	MaxSnapshotBytes int64
	// MaxHeaderBytes bounds a request's line and headers; default 8 KiB (net/http reads up to
	// 4 KiB more before it answers 431).
	MaxHeaderBytes int
	// MaxConnections bounds the connections served at once; 0 means no limit. Beyond it one
	// more is accepted and waits, unread, for a place (counted as refused by the connections
	// limit), and the rest wait in the kernel's accept queue until one closes.
	MaxConnections int
	// HeaderReadTimeout bounds a client's TLS handshake and the reading of each request's
	// headers; default 10s.
	HeaderReadTimeout time.Duration
	// BodyReadTimeout bounds the reading of a request's body, from the request's arrival;
	// default 10s.
	BodyReadTimeout time.Duration
	// Limits are the validation limits.
	Limits Limits
	// LeaderWait is how long a request waits for a leader to appear before 503 no_leader;
	// default 3s.
	LeaderWait time.Duration
	// StreamProgress is how often a streamed watch gets a progress event; default 5s.
	StreamProgress time.Duration
	// StreamBuffer is how many events a streamed watch may have waiting to be written before
	// it is dropped with a reset; default 1024.
	StreamBuffer int
	// CommandTimeout bounds a write's wait for its commit (a blocking acquire adds its wait);
	// default 10s. Past it the outcome is reported unknown.
	CommandTimeout time.Duration
	// TLS, if set, serves the API over HTTPS only: a connection whose handshake fails (plain
	// HTTP, or a missing or untrusted client certificate when TLS asks for one) is closed
	// without an answer.
	TLS *tls.Config
	// ForwardTLS, if set, makes forwarding to the leader use HTTPS with this configuration.
	ForwardTLS *tls.Config
	// IsNode tells, with TLS, whether a connection's client certificate is a node certificate
	// of the cluster's CA. Only such connections may mark a request as forwarded by another
	// node (X-Raftlock-Forwarded); from others the mark is removed and the request is handled
	// as a client's. Nil with TLS trusts no connection. Without TLS the mark cannot be
	// authenticated and is believed.
	IsNode func(*tls.ConnectionState) bool
	// Logger receives request errors; default discards.
	Logger hclog.Logger
	// RateLimit is the write requests per second one client may send to this node, with a
	// burst of twice that; 0 turns the limit off. A client is a token under ACL, an IP address
	// otherwise (or when the token is unknown here).
	RateLimit float64
	// ACL requires a token on every /v1 request but /v1/health, /v1/ready and
	// POST /v1/acl/bootstrap, and checks its policies (docs/acl.md); it also serves the
	// /v1/acl endpoints. Every node of a cluster must agree on it.
	ACL bool
	// AuditLog, if set, gets an entry for every state-changing request this node receives
	// from a client. The caller closes it after the server.
	AuditLog *AuditLog
	// Pprof serves Go's runtime profiles of this node under /debug/pprof/; under ACL they need
	// operator:read.
	Pprof bool
	// UI serves the web console under /ui/ (package ui). Its files need no token; the page
	// asks for one under ACL and reads the API with it.
	UI bool
}

// Server serves the v1 API for one node.
type Server struct {
	cfg   Config
	node  Node
	log   hclog.Logger
	echo  *echo.Echo
	fwd   *forwarder
	reads *readIndexer
	// renewals batches the session renewals this follower sends to the leader.
	renewals *renewBatcher
	// stopChannel ends this server's serving of the peer channel's forwarded requests.
	stopChannel func()
	metrics     *metrics
	// refusals logs API connections whose TLS handshake failed.
	refusals *tlsutil.RefusalLog
	// closing ends when Shutdown begins, so that long polls answer at once.
	closing      context.Context
	closingStart context.CancelFunc
	// inproc is the in-memory transport to the handler (Transport).
	inproc *inProcess
	// peers serves the API on the Raft port's HTTP side (ServePeers); nil until then.
	peersMu     sync.Mutex
	peers       *http.Server
	peersClosed bool
	// console serves the console listener (ServeConsole); nil until then. Under peersMu too.
	console *http.Server

	// answering bounds the woken watches answered at once (see watchAnswer).
	answering chan struct{}
	// blocking counts each client's blocking queries (admitBlocking).
	blocking blockingLimiter
	// hub hands applied changes to the streamed watches (streamhub.go); starts shares a
	// follower's questions to the leader for their starting points (streamstart.go).
	hub    *streamHub
	starts startRounds
}

// New returns a server for node; call Serve to start it.
func New(node Node, cfg Config) *Server {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 64 << 10
	}
	if cfg.MaxSnapshotBytes == 0 {
		cfg.MaxSnapshotBytes = 1 << 30
	}
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = 8 << 10
	}
	if cfg.HeaderReadTimeout == 0 {
		cfg.HeaderReadTimeout = 10 * time.Second
	}
	if cfg.BodyReadTimeout == 0 {
		cfg.BodyReadTimeout = 10 * time.Second
	}
	if cfg.LeaderWait == 0 {
		cfg.LeaderWait = 3 * time.Second
	}
	if cfg.CommandTimeout == 0 {
		cfg.CommandTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	cfg.Limits.setDefaults()
	s := &Server{cfg: cfg, node: node, log: cfg.Logger.Named("http")}
	s.closing, s.closingStart = context.WithCancel(context.Background())
	s.answering = make(chan struct{}, maxAnswering())
	s.fwd = newForwarder(s)
	s.reads = &readIndexer{s: s}
	s.renewals = newRenewBatcher(s)
	s.metrics = newMetrics(node, cfg)
	s.hub = newStreamHub(s)
	s.refusals = tlsutil.NewRefusalLog(s.log, hclog.Debug, "closed an API connection: TLS handshake failed")
	s.echo = s.routes()
	s.inproc = newInProcess(s)
	var serves bool
	if s.stopChannel, serves = node.HandleChannel(cluster.ChannelHTTP, s.serveChannel); !serves {
		s.log.Debug("another server on this node serves the peer channel")
	}
	return s
}

// Handler returns the server's http.Handler.
func (s *Server) Handler() http.Handler { return s.echo }

// Serve serves HTTP (HTTPS with Config.TLS) on ln until Shutdown; it returns nil after a
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.MaxConnections > 0 {
		// Outside TLS: a connection counts from its accept, handshake included, to its close.
		ln = newLimitListener(ln, s.cfg.MaxConnections, func() { s.metrics.refuse(limitConnections) })
	}
	if s.cfg.TLS != nil {
		ln = tlsutil.NewListener(ln, s.cfg.TLS, tlsutil.ListenerOptions{
			HandshakeTimeout: s.cfg.HeaderReadTimeout, OnRefused: s.refusedConn})
	}
	// Innermost to the server: net/http's own error answers get the API's JSON body.
	ln = jsonErrorListener{ln, s}
	srv := s.echo.Server
	srv.Handler = s.echo
	srv.MaxHeaderBytes = s.cfg.MaxHeaderBytes
	srv.ReadHeaderTimeout = s.cfg.HeaderReadTimeout
	srv.IdleTimeout = 2 * time.Minute
	srv.ConnContext = withConnPeer
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// refusedConn counts an API connection whose TLS handshake failed. It logs at debug level only,
// bounded and rate-limited: anyone who can reach the port can cause one.
func (s *Server) refusedConn(remote net.Addr, err error) {
	s.metrics.tlsRefused.Inc()
	s.refusals.Log(remote, err)
}

// Shutdown stops accepting requests and waits for the ones in flight until ctx ends, then
// closes the rest (long polls included).
func (s *Server) Shutdown(ctx context.Context) error {
	s.closingStart()
	s.hub.writers.stopAll()
	s.inproc.refuse()
	s.stopChannel()
	err := s.echo.Server.Shutdown(ctx)
	if err != nil {
		_ = s.echo.Server.Close()
	}
	err = errors.Join(err, s.stopPeers(ctx), s.inproc.shutdown(ctx))
	s.fwd.close()
	return err
}

// Close stops the server at once, cutting off every request in flight.
func (s *Server) Close() {
	s.closingStart()
	s.hub.writers.stopAll()
	s.inproc.close()
	s.stopChannel()
	_ = s.echo.Server.Close()
	_ = s.stopPeers(nil)
	s.fwd.close()
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.errorHandler
	// The order matters, and is chosen so that nothing a client sends is believed, counted,
	// recorded or read before it is judged:
	//  1. recover: a panic is a 500, never a dropped connection.
	//  2. checkForwarded drops an X-Raftlock-Forwarded mark that did not come from another
	//     node, before anything below believes it.
	//  3. metrics and headers see every answer, refusals included, and guardBody bounds in
	//     time the reading of any body before anything may refuse the request; consoleGuard
	//     then refuses, on the console listener, what is not served there (console.go).
	//  4. identify (ACL) resolves the token from the headers alone, so that
	//  5. rateLimit counts every write by its token, or by its client's address when the token
	//     is missing or unknown here, before anything is recorded: a refused one (429) is not
	//     audited, so the limit bounds the audit log's growth too.
	//  6. audit records what is answered from here on, refusals of the token included.
	//  7. limitBody refuses a declared body over the limit; only readBody reads a body, from a
	//     handler or the forwarder (a backup to restore streams on).
	//  8. limitBlocking bounds each client's blocking queries where the client sent them,
	//     before a follower forwards one.
	//  9. authenticate (ACL) refuses a missing or unknown token before any body is read, and
	//     has a follower forward the request to the leader, which judges the token again.
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true, LogErrorFunc: s.logPanic}))
	e.Use(s.checkForwarded)
	e.Use(s.metrics.middleware)
	e.Use(s.headers)
	e.Use(s.guardBody)
	e.Use(s.consoleGuard)
	if s.cfg.ACL {
		e.Use(s.identify)
	}
	if s.cfg.RateLimit > 0 {
		e.Use(s.rateLimit(s.cfg.RateLimit))
	}
	if s.cfg.AuditLog != nil {
		e.Use(s.audit)
	}
	e.Use(s.limitBody)
	e.Use(s.limitBlocking)
	if s.cfg.ACL {
		e.Use(s.authenticate)
	}

	v1 := e.Group("/v1")
	v1.POST("/sessions", s.createSession)
	v1.GET("/sessions", s.listSessions)
	v1.POST("/sessions/renew", s.renewSessions)
	v1.GET("/sessions/:id", s.getSession)
	v1.PUT("/sessions/:id/renew", s.renewSession)
	v1.DELETE("/sessions/:id", s.destroySession)
	v1.GET("/locks", s.listLocks)
	v1.POST("/watch", s.watchStreamPost)
	v1.Any("/locks/*", s.lockRoute)
	v1.GET("/cluster", s.getCluster)
	v1.POST("/cluster/members", s.addMember)
	v1.DELETE("/cluster/members/:id", s.removeMember)
	v1.POST("/cluster/members/:id/promote", s.promoteMember)
	v1.POST("/cluster/leadership-transfer", s.transferLeadership)
	v1.GET(snapshotPath[len("/v1"):], s.saveSnapshot)
	v1.PUT(snapshotPath[len("/v1"):], s.restoreSnapshot)
	v1.GET("/health", s.health)
	v1.GET("/ready", s.ready)
	v1.GET("/openapi.yaml", s.openAPI)
	v1.GET(readIndexPath[len("/v1"):], s.readIndexHandler)
	if s.cfg.ACL {
		s.aclRoutes(v1.Group("/acl"))
	}
	e.GET("/metrics", echo.WrapHandler(s.metrics.handler()))
	if s.cfg.Pprof {
		s.pprofRoutes(e.Group("/debug/pprof"))
	}
	if s.cfg.UI {
		s.uiRoutes(e)
	}
	return e
}

func (s *Server) logPanic(c echo.Context, err error, stack []byte) error {
	s.log.Error("handler panic", "method", clip(c.Request().Method, maxAuditMethod), "path", clip(c.Request().URL.Path, maxLoggedPath), "error", err, "stack", string(stack))
	return err
}

// headers sets X-Raftlock-Index, X-Raftlock-Leader and X-Raftlock-Features just before the
// response is written, unless a forwarded response already carries the leader's.
func (s *Server) headers(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		res := c.Response()
		res.Before(func() {
			h := res.Header()
			if h.Get(api.HeaderIndex) == "" {
				h.Set(api.HeaderIndex, strconv.FormatUint(s.node.AppliedIndex(), 10))
			}
			if h.Get(api.HeaderLeader) == "" {
				if id, _ := s.node.Leader(); id != "" {
					h.Set(api.HeaderLeader, id)
				}
			}
			if h.Get(api.HeaderFeatures) == "" {
				h.Set(api.HeaderFeatures, strconv.Itoa(s.node.FSM().FeatureCount()))
			}
		})
		return next(c)
	}
}

// atLeader runs fn here if this node is the ready leader, or forwards the request to the
// leader. A request that was already forwarded once is never forwarded again.
func (s *Server) atLeader(c echo.Context, fn func() error) error {
	deadline := time.Now().Add(s.cfg.LeaderWait)
	forwarded := c.Request().Header.Get(api.HeaderForwarded) != ""
	for {
		if s.node.IsLeader() {
			return fn()
		}
		id, addr := s.node.Leader()
		if id != "" && id != s.node.ID() && addr != "" && !forwarded {
			return s.fwd.forward(c, id, addr)
		}
		if time.Now().After(deadline) || forwarded && id != s.node.ID() {
			if forwarded {
				return noLeader("this node received a forwarded request but is not the leader; nothing was applied")
			}
			return noLeader("no leader is known right now; nothing was applied")
		}
		select {
		case <-c.Request().Context().Done():
			return noLeader("request cancelled while waiting for a leader")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// read runs fn locally: at once for a stale read, otherwise after a read barrier on the leader
// (forwarding there if this node does not lead).
func (s *Server) read(c echo.Context, q query, fn func() error) error {
	if q.stale {
		return fn()
	}
	return s.atLeader(c, func() error {
		if err := s.readBarrier(c); err != nil {
			return err
		}
		return fn()
	})
}

// readBarrier confirms, for a linearizable read on this leader, that it still leads.
func (s *Server) readBarrier(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.CommandTimeout)
	defer cancel()
	if err := s.node.ReadBarrier(ctx); err != nil {
		return fromClusterError(err)
	}
	return nil
}

// commandContext bounds a write by the command timeout plus extra (a blocking acquire's wait).
// A blocking one also ends when the server begins to shut down, so that its wait ends at once.
func (s *Server) commandContext(c echo.Context, extra time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.CommandTimeout+extra)
	if extra == 0 {
		return ctx, cancel
	}
	stop := context.AfterFunc(s.closing, cancel)
	return ctx, func() { stop(); cancel() }
}

func (s *Server) health(c echo.Context) error {
	if s.node.IsRemoved() {
		return removedError()
	}
	f := s.node.FSM()
	h := api.Health{Status: "ok", ID: s.node.ID(), Version: s.cfg.Version,
		Features: featureNames(f.KnownFeatures()), ClusterFeatures: featureNames(f.Features()), AppliedIndex: f.AppliedIndex(),
		Suffrage: s.node.OwnSuffrage(), FeatureGate: s.node.FeatureGate()}
	if id := c.QueryParam("member"); id != "" {
		if len(id) > 128 {
			return invalid("member: at most 128 characters")
		}
		suffrage, started := s.node.MemberView(id)
		h.Member = &api.MemberView{ID: id, Suffrage: suffrage, Started: started}
	}
	return c.JSON(http.StatusOK, h)
}

// featureNames returns the features' names; an empty list, not null, when there are none.
func featureNames(fs []fsm.Feature) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = string(f)
	}
	return out
}

func (s *Server) ready(c echo.Context) error {
	if s.node.IsRemoved() {
		return removedError()
	}
	if why := s.node.NotReady(c.Request().Context()); why != "" {
		return noLeader("not ready: %s", why)
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready", "id": s.node.ID()})
}
