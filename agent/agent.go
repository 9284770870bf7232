package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/httpapi"
	"github.com/raftlock/raftlock/internal/version"
	"github.com/raftlock/raftlock/tlsutil"
)

// Agent is one running raftlock server: a Raft node and the HTTP API in front of it.
type Agent struct {
	cfg    config.Config
	log    hclog.Logger
	node   *cluster.Node
	http   *httpapi.Server
	httpLn net.Listener
	// consoleLn is the console listener (--console-addr); nil without one.
	consoleLn net.Listener
	// tls holds the node's certificate and CA; nil without TLS.
	tls   *tlsutil.Store
	audit *httpapi.AuditLog // nil without --audit-log

	serveErr chan error
	halter   *halter
	stopOnce sync.Once
	stopErr  error
}

// Listeners are optional pre-bound listeners; nil ones are bound from the config's addresses.
type Listeners struct {
	HTTP, Raft net.Listener
	// Console is the console listener, used only with cfg.ConsoleAddr set (which is bound when
	// this is nil).
	Console net.Listener
}

// Start binds the listeners, starts the node and serves the API. With cfg.Join set it asks the
// named members to add it, and returns only once it was added (or ctx ends).
func Start(ctx context.Context, cfg config.Config, log hclog.Logger, ls Listeners) (*Agent, error) {
	return start(ctx, cfg, log, ls, func(status int, _ error) { os.Exit(status) })
}

// start is Start with what happens when the node must stop for good (a failed write to its
// Raft log, an entry only a newer version applies): halt gets the exit status a supervisor
// reads (ExitStorageFailure, ExitRefused) and the cause; the node has logged why. An agent
// alone in its process exits; if halt returns, the agent stops (Kill), and the process goes on.
func start(ctx context.Context, cfg config.Config, log hclog.Logger, ls Listeners, halt func(status int, err error)) (*Agent, error) {
	h := &halter{halt: halt, ready: make(chan struct{})}
	a, err := startWith(ctx, cfg, log, ls, h)
	h.started(a)
	return a, err
}

// startWith starts the agent, its node's stops going through h.
func startWith(ctx context.Context, cfg config.Config, log hclog.Logger, ls Listeners, h *halter) (*Agent, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	features, err := supportedFeatures(cfg.DisableFeatures)
	if err != nil {
		closeListeners(ls)
		return nil, err
	}
	store, err := loadTLS(cfg, log)
	if err != nil {
		closeListeners(ls)
		return nil, err
	}
	if ls.HTTP == nil {
		if ls.HTTP, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
			closeListeners(ls)
			return nil, fmt.Errorf("agent: http listen: %w", err)
		}
	}
	if ls.Raft == nil {
		if ls.Raft, err = net.Listen("tcp", cfg.RaftAddr); err != nil {
			closeListeners(ls)
			return nil, fmt.Errorf("agent: raft listen: %w", err)
		}
	}
	if cfg.ConsoleAddr == "" && ls.Console != nil {
		ls.Console.Close()
		ls.Console = nil
	}
	if cfg.ConsoleAddr != "" && (store == nil || !cfg.ACL) {
		closeListeners(ls)
		return nil, errors.New("agent: --console-addr needs TLS and --acl")
	}
	if cfg.ConsoleAddr != "" && ls.Console == nil {
		if ls.Console, err = net.Listen("tcp", cfg.ConsoleAddr); err != nil {
			closeListeners(ls)
			return nil, fmt.Errorf("agent: console listen: %w", err)
		}
	}
	advHTTP := cfg.AdvertiseHTTP
	if advHTTP == "" {
		advHTTP = ls.HTTP.Addr().String()
	}
	var nodeTLS cluster.TLS
	apiCfg := httpapi.Config{
		Version:           version.Version,
		Commit:            version.Get().Commit,
		MaxBodyBytes:      cfg.MaxBodyBytes,
		MaxSnapshotBytes:  cfg.MaxSnapshotBytes,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		MaxConnections:    cfg.MaxConnections,
		HeaderReadTimeout: cfg.HeaderReadTimeout,
		BodyReadTimeout:   cfg.BodyReadTimeout,
		Limits: httpapi.Limits{MaxSessions: cfg.MaxSessions, MaxWaitersPerLock: cfg.MaxWaitersPerLock,
			MaxSessionsPerToken: cfg.MaxSessionsPerToken, MaxBlockingPerToken: cfg.MaxWatchesPerToken,
			MaxBlockingPerAddress: cfg.MaxWatchesPerAddr},
		Logger:    log,
		RateLimit: cfg.RateLimit,
		ACL:       cfg.ACL,
		Pprof:     cfg.EnablePprof,
		UI:        cfg.UI,

		StreamProgress: cfg.StreamProgress,
		StreamBuffer:   cfg.StreamBuffer,
	}
	if store != nil {
		peer := store.PeerClientConfig()
		nodeTLS = cluster.TLS{RaftServer: store.PeerServerConfig(), RaftClient: peer, HTTPClient: peer,
			MaxHandshakes: cfg.MaxRaftHandshakes}
		apiCfg.TLS, apiCfg.ForwardTLS = store.APIServerConfig(cfg.TLSVerifyClients), peer
		apiCfg.IsNode = store.IsNode
		apiCfg.Certificate = store.Certificate
	}
	node, err := cluster.New(cluster.Config{
		ID:             cfg.ID,
		DataDir:        cfg.DataDir,
		LogStore:       cfg.LogStore,
		RaftListener:   ls.Raft,
		AdvertiseRaft:  cfg.AdvertiseRaft,
		AdvertiseHTTP:  advHTTP,
		InitialCluster: cfg.InitialCluster,
		Join:           cfg.Join,
		// The members' API on the Raft port too: a member whose data directory is new asks
		// the others listed in --initial-cluster, whose HTTP addresses it does not know,
		// whether the cluster counts it already (cluster.ErrAlreadyBootstrapped).
		APIOnRaftPort:              true,
		PeerAddrs:                  cfg.RaftPeerAddrs,
		ClockOffset:                cfg.ClockOffset,
		HeartbeatTimeout:           cfg.HeartbeatTimeout,
		ElectionTimeout:            cfg.ElectionTimeout,
		LeaderLeaseTimeout:         cfg.LeaderLeaseTimeout,
		SnapshotThreshold:          cfg.SnapshotThreshold,
		SnapshotInterval:           cfg.SnapshotInterval,
		TrailingLogs:               cfg.TrailingLogs,
		WatchHistoryBytes:          cfg.WatchHistoryBytes,
		Token:                      cfg.AgentToken,
		TLS:                        nodeTLS,
		Logger:                     log,
		Version:                    version.Version,
		Features:                   features,
		OnStorageFailure:           h.on(ExitStorageFailure),
		OnRefusal:                  h.on(ExitRefused),
		UnsafeNoLogFsync:           cfg.UnsafeNoLogFsync,
		UnsafeSkipRejoinCheck:      cfg.UnsafeSkipRejoinCheck,
		UnsafeRestoreKeepsSessions: cfg.UnsafeRestoreKeepsSessions,
	})
	if err != nil {
		closeListeners(ls)
		return nil, err
	}
	var audit *httpapi.AuditLog
	if cfg.AuditLog != "" {
		if audit, err = httpapi.OpenAuditLog(cfg.AuditLog); err != nil {
			_ = node.Close()
			ls.HTTP.Close()
			if ls.Console != nil {
				ls.Console.Close()
			}
			return nil, fmt.Errorf("agent: %w", err)
		}
		apiCfg.AuditLog = audit
	}
	a := &Agent{
		cfg:       cfg,
		log:       log,
		node:      node,
		http:      httpapi.New(node, apiCfg),
		tls:       store,
		audit:     audit,
		httpLn:    ls.HTTP,
		consoleLn: ls.Console,
		serveErr:  make(chan error, 1),
		halter:    h,
	}
	go func() { a.serveErr <- a.http.Serve(ls.HTTP) }()
	if ls.Console != nil {
		go func() {
			if err := a.http.ServeConsole(ls.Console, store.ConsoleServerConfig()); err != nil {
				log.Error("the console listener stopped", "error", err)
			}
		}()
		log.Info("serving the console and the API without client certificates, a token required", "console", a.ConsoleEndpoint()+"/ui/")
	}
	go func() {
		if err := a.http.ServePeers(node.APIListener()); err != nil {
			log.Error("the members' API on the Raft port stopped", "error", err)
		}
	}()
	log.Info("serving", "id", cfg.ID, "api", a.Endpoint(), "raft", ls.Raft.Addr().String(), "tls", store != nil, "data_dir", cfg.DataDir)
	if len(cfg.Join) > 0 {
		if err := node.Join(ctx, cfg.Join); err != nil {
			a.Kill()
			return nil, fmt.Errorf("agent: %w", err)
		}
		log.Info("joined the cluster", "via", cfg.Join)
	}
	return a, nil
}

// halter stops an agent for good from the node's hooks (OnStorageFailure, OnRefusal), which
// run on Raft's write and apply paths, possibly before start has the agent to stop.
type halter struct {
	halt  func(status int, err error)
	ready chan struct{} // closed when start returns; agent is then set, or nil if start failed
	agent *Agent
}

// on returns the hook for a stop with exit status status: halt is told (a lone agent exits
// there), then the agent stops, once start has returned it (a failed start cleans up itself).
func (h *halter) on(status int) func(error) {
	return func(err error) {
		h.halt(status, err)
		go func() {
			<-h.ready
			if h.agent != nil {
				h.agent.Kill()
			}
		}()
	}
}

// started records what start returned, and lets the hooks act.
func (h *halter) started(a *Agent) {
	h.agent = a
	close(h.ready)
}

// ExitStorageFailure is the exit status of an agent whose Raft log or stable store failed to
// write: it exits at once, since nothing more may be written or acknowledged, and a crash is
// what the rest of the cluster and the node's own restart are built to handle.
const ExitStorageFailure = 3

// ExitRefused is the exit status of an agent that stopped, or would not start, for a reason a
// restart of the same binary on the same data cannot cure (see Refused): a supervisor must not
// restart it in a loop.
const ExitRefused = 4

// Refused reports whether err, from Start, is a refusal a restart cannot cure: the data needs
// a newer version (cluster.ErrNeedsNewerVersion), the data directory was lost while the
// cluster still counts this member (cluster.ErrAlreadyBootstrapped), or the cluster has
// another member at this node's id or address (cluster.ErrMemberConflict), or the cluster
// refused to add it because it lacks features the cluster enabled (cluster.ErrIncompatible:
// it needs the version the members run).
func Refused(err error) bool {
	return errors.Is(err, cluster.ErrNeedsNewerVersion) || errors.Is(err, cluster.ErrAlreadyBootstrapped) ||
		errors.Is(err, cluster.ErrMemberConflict) || errors.Is(err, cluster.ErrIncompatible)
}

// Removed returns a channel closed once the node has been removed from its cluster.
func (a *Agent) Removed() <-chan struct{} { return a.node.Removed() }

// Node returns the agent's cluster node.
func (a *Agent) Node() *cluster.Node { return a.node }

// HTTPAddr returns the address the API listens on.
func (a *Agent) HTTPAddr() string { return a.httpLn.Addr().String() }

// ConsoleEndpoint returns the console listener's base URL (https://), or "" without one.
func (a *Agent) ConsoleEndpoint() string {
	if a.consoleLn == nil {
		return ""
	}
	return "https://" + a.consoleLn.Addr().String()
}

// Endpoint returns the API's base URL: https:// with TLS, else http://.
func (a *Agent) Endpoint() string {
	if a.tls != nil {
		return "https://" + a.HTTPAddr()
	}
	return "http://" + a.HTTPAddr()
}

// Reload re-reads the TLS certificate, key and CA bundle for new connections (the agent
// command calls it on SIGHUP). A file that fails to load keeps the previous material; the
// error says which. Without TLS there is nothing to reload.
func (a *Agent) Reload() error {
	if a.tls == nil {
		a.log.Info("reload: TLS is off; nothing to reload")
		return nil
	}
	if err := a.tls.Reload(); err != nil {
		return fmt.Errorf("agent: reload: %w", err)
	}
	return nil
}

// loadTLS loads the node's TLS files, or returns nil when TLS is off.
func loadTLS(cfg config.Config, log hclog.Logger) (*tlsutil.Store, error) {
	if !cfg.TLS() {
		return nil, nil
	}
	minVersion, err := tlsutil.ParseMinVersion(cfg.TLSMinVersion)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	s, err := tlsutil.New(tlsutil.Files{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile}, minVersion, log.Named("tls"))
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return s, nil
}

func closeListeners(ls Listeners) {
	for _, ln := range []net.Listener{ls.HTTP, ls.Raft, ls.Console} {
		if ln != nil {
			ln.Close()
		}
	}
}

// Errors reports a failure of the HTTP server while the agent runs.
func (a *Agent) Errors() <-chan error { return a.serveErr }

// Shutdown stops gracefully: it stops taking requests (long polls end at once, their queue
// entries removed), hands leadership over if it leads, and closes the node. Whatever still runs
// when ctx ends is cut off.
func (a *Agent) Shutdown(ctx context.Context) error {
	a.stopOnce.Do(func() {
		var leaveErr error
		if a.cfg.LeaveOnShutdown {
			// Leave while the API still serves: the new leader may need to reach us.
			leaveErr = a.node.Leave(ctx)
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		httpErr := a.http.Shutdown(hctx)
		cancel()
		a.stopErr = errors.Join(leaveErr, httpErr, a.closeAudit(), a.node.Shutdown(ctx))
	})
	return a.stopErr
}

// Kill stops the agent at once, without handing leadership over: from the cluster's point of
// view, a crash.
func (a *Agent) Kill() {
	a.stopOnce.Do(func() {
		a.http.Close()
		_ = a.closeAudit()
		_ = a.node.Close()
	})
}

// closeAudit closes the audit log, if any, once the HTTP server has stopped writing to it.
func (a *Agent) closeAudit() error {
	if a.audit == nil {
		return nil
	}
	return a.audit.Close()
}

// supportedFeatures returns every feature but the disabled ones, or nil (all of them) when
// none is disabled.
func supportedFeatures(disabled []string) ([]fsm.Feature, error) {
	if len(disabled) == 0 {
		return nil, nil
	}
	all := fsm.AllFeatures()
	for _, d := range disabled {
		if !slices.Contains(all, fsm.Feature(d)) {
			return nil, fmt.Errorf("agent: --disable-features: unknown feature %q (this version has %v)", d, all)
		}
	}
	return slices.DeleteFunc(all, func(f fsm.Feature) bool { return slices.Contains(disabled, string(f)) }), nil
}
