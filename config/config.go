package config

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Config is the configuration of one raftlock agent.
type Config struct {
	ID             string
	DataDir        string
	LogStore       string
	HTTPAddr       string
	RaftAddr       string
	AdvertiseHTTP  string
	AdvertiseRaft  string
	InitialCluster map[string]string
	Join           []string
	// RaftPeerAddrs overrides the address dialled for some peers (fault injection only).
	RaftPeerAddrs map[string]string
	// ClockOffset skews the wall-clock readings the node writes into commands (fault injection only).
	ClockOffset time.Duration
	// DisableFeatures makes the node support none of these features, as an older version
	// would not (tests of rolling upgrades only).
	DisableFeatures []string
	// UnsafeNoLogFsync skips the fsync of the Raft log (hidden; for the harness's self-test only).
	UnsafeNoLogFsync bool
	// UnsafeSkipRejoinCheck starts a node on an empty data directory without asking the others
	// whether the cluster counts it already (hidden; for the harness's self-test only).
	UnsafeSkipRejoinCheck bool
	// UnsafeRestoreKeepsSessions makes a restore keep the backup's sessions and their holds,
	// as restores did before they ended every session (hidden; for the harness's self-test only).
	UnsafeRestoreKeepsSessions bool
	// StreamProgress is how often a streamed watch gets a progress event, and StreamBuffer how
	// many events one may have waiting before it is dropped with a reset (hidden; 0: the
	// defaults, 5s and 1024; for tests).
	StreamProgress time.Duration
	StreamBuffer   int

	LogLevel  string
	LogFormat string

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64

	MaxBodyBytes int64
	// MaxSnapshotBytes bounds a backup file sent to restore (PUT /v1/snapshot).
	MaxSnapshotBytes int64
	// MaxHeaderBytes bounds a request's line and headers (the HTTP server allows 4 KiB over it).
	MaxHeaderBytes int
	// MaxConnections bounds the API connections open at once (handshaking, reading, waiting or
	// idle); 0: no limit.
	MaxConnections int
	// HeaderReadTimeout bounds the time a client takes to send a request's headers, and its TLS
	// handshake before that.
	HeaderReadTimeout time.Duration
	// BodyReadTimeout bounds the time a client takes to send a request's body.
	BodyReadTimeout time.Duration
	// MaxRaftHandshakes bounds, with TLS, the incoming Raft connections whose handshake is in
	// progress (a quarter of it from one IP address); 0: no bound.
	MaxRaftHandshakes int
	MaxSessions       int
	// WatchHistoryBytes bounds the memory of the node's log of recent lock changes, from which
	// prefix watches are answered.
	WatchHistoryBytes int
	MaxWaitersPerLock int
	ShutdownTimeout   time.Duration
	LeaveOnShutdown   bool

	// RateLimit is the write requests per second one client may send to this node (token
	// bucket, burst twice the rate); 0 turns it off.
	RateLimit float64
	// AuditLog is the file that gets one JSON line per state-changing request; "" for none.
	AuditLog string
	// EnablePprof serves Go's runtime profiles under /debug/pprof/ on the HTTP API address.
	EnablePprof bool
	// UI serves the web console under /ui/ on the HTTP API address (on by default).
	UI bool
	// ConsoleAddr, if set, is a second HTTPS address serving the console and the API with the
	// node's certificate but without asking for a client certificate: every API request there
	// needs a token instead, and nothing meant only for the members is served (needs TLS and
	// ACL).
	ConsoleAddr string
	// ACL requires tokens and checks their policies (docs/acl.md); all nodes must agree on it.
	ACL bool
	// MaxSessionsPerToken bounds the sessions one token owns at once under ACL; 0: unlimited.
	MaxSessionsPerToken int
	// MaxWatchesPerToken bounds the blocking queries (watches) one token has waiting on the
	// node that received them, under ACL; MaxWatchesPerAddr those of one IP address, for
	// requests without a token the node knows. 0: unlimited.
	MaxWatchesPerToken, MaxWatchesPerAddr int
	// AgentToken is the token this agent sends when it joins, publishes its HTTP address to
	// the leader or leaves; under ACL it needs operator:write.
	AgentToken string
	// WaitWhenRemoved keeps the agent running, not ready, once it has been removed from the
	// cluster, instead of stopping it.
	WaitWhenRemoved bool

	// TLSCertFile and TLSKeyFile are this node's certificate and key (PEM); with them the API is
	// HTTPS only and Raft, forwarding and join use mutual TLS.
	TLSCertFile, TLSKeyFile string
	// TLSCAFile is the CA bundle peers (and, with TLSVerifyClients, API clients) are checked against.
	TLSCAFile string
	// TLSVerifyClients requires API clients to present a certificate of the CA.
	TLSVerifyClients bool
	// TLSMinVersion is "1.2" or "1.3".
	TLSMinVersion string
}

// Default returns the defaults: one node on 127.0.0.1:7001 (HTTP) and :7101 (Raft).
func Default() Config {
	return Config{
		ID:                 "n1",
		LogStore:           "",
		HTTPAddr:           "127.0.0.1:7001",
		RaftAddr:           "127.0.0.1:7101",
		LogLevel:           "info",
		LogFormat:          "text",
		HeartbeatTimeout:   500 * time.Millisecond,
		ElectionTimeout:    500 * time.Millisecond,
		LeaderLeaseTimeout: 500 * time.Millisecond,
		SnapshotThreshold:  16384,
		SnapshotInterval:   5 * time.Second,
		TrailingLogs:       10240,
		MaxBodyBytes:       64 << 10,
		MaxSnapshotBytes:   1 << 30,
		MaxHeaderBytes:     8 << 10,
		MaxConnections:     4096,
		HeaderReadTimeout:  10 * time.Second,
		BodyReadTimeout:    10 * time.Second,
		MaxRaftHandshakes:  256,
		MaxSessions:        1_000_000,
		MaxWaitersPerLock:  10_000,
		MaxWatchesPerToken: 256,
		MaxWatchesPerAddr:  1024,
		WatchHistoryBytes:  16 << 20,
		ShutdownTimeout:    10 * time.Second,
		TLSMinVersion:      "1.2",
		UI:                 true,
	}
}

// AddFlags registers every setting as a flag on fs, with the defaults of Default.
func AddFlags(fs *pflag.FlagSet) {
	d := Default()
	fs.String("config", "", "optional config file (YAML, TOML or JSON) whose keys are these flag names")
	fs.String("id", d.ID, "unique, stable id of this node")
	fs.String("data-dir", "", "directory for the Raft log, stable store and snapshots (required)")
	fs.String("log-store", d.LogStore, "Raft log store of a new data dir: wal (raft-wal, one sync per append; the default) or boltdb (raft-boltdb, two syncs per commit); an existing data dir keeps the one it holds")
	fs.String("http-addr", d.HTTPAddr, "address to serve the HTTP API on")
	fs.String("raft-addr", d.RaftAddr, "address for Raft traffic between nodes")
	fs.String("advertise-http", "", "HTTP address other machines reach this node at (default: --http-addr)")
	fs.String("advertise-raft", "", "Raft address other nodes reach this node at (default: --raft-addr)")
	fs.String("initial-cluster", "", "bootstrap members as id=raft-addr,... (used only when the data dir is new)")
	fs.StringSlice("join", nil, "HTTP address(es) of running members to join through (instead of --initial-cluster)")
	fs.String("raft-peer-addrs", "", "fault injection: dial peers at these addresses instead, as id=addr,...")
	_ = fs.MarkHidden("raft-peer-addrs")
	fs.Duration("clock-offset", 0, "fault injection: add this to the wall-clock readings the node writes into commands")
	_ = fs.MarkHidden("clock-offset")
	fs.StringSlice("disable-features", nil, "upgrade tests: support none of these features, as an older version would not")
	_ = fs.MarkHidden("disable-features")
	fs.Bool("unsafe-no-log-fsync", false, "test only: do not fsync the Raft log, so that a power cut loses acknowledged writes")
	_ = fs.MarkHidden("unsafe-no-log-fsync")
	fs.Bool("unsafe-skip-rejoin-check", false, "test only: start on an empty data dir without asking whether the cluster counts this node already")
	_ = fs.MarkHidden("unsafe-skip-rejoin-check")
	fs.Bool("unsafe-restore-keeps-sessions", false, "test only: a restore keeps the backup's sessions, so that clients go on believing holds it changed")
	_ = fs.MarkHidden("unsafe-restore-keeps-sessions")
	fs.Duration("stream-progress", 0, "tests: how often a streamed watch gets a progress event (0: 5s)")
	_ = fs.MarkHidden("stream-progress")
	fs.Int("stream-buffer", 0, "tests: events a streamed watch may have waiting before it is dropped with a reset (0: 1024)")
	_ = fs.MarkHidden("stream-buffer")
	fs.String("log-level", d.LogLevel, "log level: trace, debug, info, warn or error")
	fs.String("log-format", d.LogFormat, "log format: text or json")
	fs.Duration("heartbeat-timeout", d.HeartbeatTimeout, "Raft heartbeat timeout")
	fs.Duration("election-timeout", d.ElectionTimeout, "Raft election timeout")
	fs.Duration("leader-lease-timeout", d.LeaderLeaseTimeout, "Raft leader lease timeout")
	fs.Uint64("snapshot-threshold", d.SnapshotThreshold, "log entries between snapshots")
	fs.Duration("snapshot-interval", d.SnapshotInterval, "how often to check whether to snapshot")
	fs.Uint64("trailing-logs", d.TrailingLogs, "log entries kept after a snapshot, for slow followers")
	fs.Int64("max-body-bytes", d.MaxBodyBytes, "largest accepted request body; a larger one is refused (413) before it is read")
	fs.Int64("max-snapshot-bytes", d.MaxSnapshotBytes, "largest backup file a restore (PUT /v1/snapshot) accepts; it streams to the leader, never held whole")
	fs.Int("max-header-bytes", d.MaxHeaderBytes, "largest request line and headers the API reads (the server allows 4 KiB over it); a larger request is answered 431 and its connection closed")
	fs.Int("max-connections", d.MaxConnections, "most API connections open at once (handshaking, reading, waiting or idle); beyond it one more waits accepted and the rest in the kernel's accept queue until one closes (0: no limit)")
	fs.Duration("header-read-timeout", d.HeaderReadTimeout, "how long an API client may take to send a request's headers (and, with TLS, to finish its handshake) before its connection is closed")
	fs.Duration("body-read-timeout", d.BodyReadTimeout, "how long an API client may take to send a request's body before the request is refused and its connection closed")
	fs.Int("max-raft-handshakes", d.MaxRaftHandshakes, "with TLS, most incoming Raft connections in their TLS handshake at once, and a quarter of that from one IP address; more are closed at once (0: no limit)")
	fs.Int("max-sessions", d.MaxSessions, "most sessions the cluster holds (0: unlimited)")
	fs.Int("max-waiters-per-lock", d.MaxWaitersPerLock, "most queued acquires per lock (0: unlimited)")
	fs.Int("watch-history-bytes", d.WatchHistoryBytes, "memory for this node's log of recent lock changes, from which prefix watches are answered; a watch from an index older than it remembers gets the whole prefix (between 65536 and 1073741824)")
	fs.Duration("shutdown-timeout", d.ShutdownTimeout, "how long a graceful shutdown may take")
	fs.Bool("leave-on-shutdown", false, "on SIGINT/SIGTERM, leave the cluster for good instead of just stopping")
	fs.String("tls-cert-file", "", "this node's certificate (PEM); with --tls-key-file, the API is served over HTTPS only and Raft, forwarding and --join use mutual TLS")
	fs.String("tls-key-file", "", "the private key of --tls-cert-file (PEM)")
	fs.String("tls-ca-file", "", "CA bundle (PEM) other nodes' certificates (and clients', with --tls-verify-clients) must be signed by; required with --tls-cert-file")
	fs.Bool("tls-verify-clients", false, "also require API clients to present a certificate signed by --tls-ca-file")
	fs.String("tls-min-version", d.TLSMinVersion, "lowest TLS version accepted: 1.2 or 1.3")
	fs.Float64("rate-limit", 0, "write requests per second one client (its token with --acl, else its IP address) may send to this node, burst twice that; beyond it 429 with Retry-After, nothing applied (0: off)")
	fs.String("audit-log", "", "append one JSON line per state-changing request received by this node to this file (fsynced every second)")
	fs.Bool("enable-pprof", false, "serve Go's runtime profiles (CPU, heap, goroutines, trace) at /debug/pprof/ on the HTTP API address; with --acl, to tokens with operator:read")
	fs.Bool("ui", d.UI, "serve the web console at /ui/ on the HTTP API address (--ui=false turns it off); under --acl the page asks for a token")
	fs.String("console-addr", "", "also serve the web console and the API over HTTPS on this address without asking for a client certificate: every API call there needs a token, and member-only routes are refused (needs --tls-cert-file and --acl; off by default)")
	fs.Bool("acl", false, "require a token on every /v1 request but health, ready and the ACL bootstrap, and check its policies; all nodes must agree")
	fs.Int("max-sessions-per-token", 0, "with --acl, most sessions one token may own at once; beyond it 429 (0: unlimited)")
	fs.Int("max-watches-per-token", d.MaxWatchesPerToken, "with --acl, most blocking queries (watches, reads with ?index) one token may have waiting on this node at once; beyond it 429 with Retry-After (0: unlimited)")
	fs.Int("max-watches-per-address", d.MaxWatchesPerAddr, "most blocking queries (watches, reads with ?index) one IP address may have waiting on this node at once, for requests without a token the node knows; beyond it 429 with Retry-After (0: unlimited)")
	fs.String("agent-token", "", "with --acl, the token (operator:write) this agent sends to join, publish its HTTP address and leave")
	fs.Bool("wait-when-removed", false, "once removed from the cluster, keep running (not ready) instead of stopping")
}

// Load reads the settings from fs (after parsing), RAFTLOCK_* environment variables and the
// config file named by --config or RAFTLOCK_CONFIG, and validates them.
func Load(fs *pflag.FlagSet) (Config, error) {
	v := viper.New()
	v.SetEnvPrefix("RAFTLOCK")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	if err := v.BindPFlags(fs); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if file := v.GetString("config"); file != "" {
		v.SetConfigFile(file)
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("config: reading %s: %w", file, err)
		}
		if err := checkKeys(v, fs); err != nil {
			return Config{}, err
		}
	}
	c := Config{
		ID:                         v.GetString("id"),
		DataDir:                    v.GetString("data-dir"),
		LogStore:                   v.GetString("log-store"),
		HTTPAddr:                   v.GetString("http-addr"),
		RaftAddr:                   v.GetString("raft-addr"),
		AdvertiseHTTP:              v.GetString("advertise-http"),
		AdvertiseRaft:              v.GetString("advertise-raft"),
		Join:                       splitList(v.GetStringSlice("join")),
		LogLevel:                   v.GetString("log-level"),
		LogFormat:                  v.GetString("log-format"),
		HeartbeatTimeout:           v.GetDuration("heartbeat-timeout"),
		ElectionTimeout:            v.GetDuration("election-timeout"),
		LeaderLeaseTimeout:         v.GetDuration("leader-lease-timeout"),
		SnapshotThreshold:          v.GetUint64("snapshot-threshold"),
		SnapshotInterval:           v.GetDuration("snapshot-interval"),
		TrailingLogs:               v.GetUint64("trailing-logs"),
		ClockOffset:                v.GetDuration("clock-offset"),
		DisableFeatures:            splitList(v.GetStringSlice("disable-features")),
		UnsafeNoLogFsync:           v.GetBool("unsafe-no-log-fsync"),
		UnsafeSkipRejoinCheck:      v.GetBool("unsafe-skip-rejoin-check"),
		UnsafeRestoreKeepsSessions: v.GetBool("unsafe-restore-keeps-sessions"),
		StreamProgress:             v.GetDuration("stream-progress"),
		StreamBuffer:               v.GetInt("stream-buffer"),
		MaxBodyBytes:               v.GetInt64("max-body-bytes"),
		MaxSnapshotBytes:           v.GetInt64("max-snapshot-bytes"),
		MaxHeaderBytes:             v.GetInt("max-header-bytes"),
		MaxConnections:             v.GetInt("max-connections"),
		HeaderReadTimeout:          v.GetDuration("header-read-timeout"),
		BodyReadTimeout:            v.GetDuration("body-read-timeout"),
		MaxRaftHandshakes:          v.GetInt("max-raft-handshakes"),
		MaxSessions:                v.GetInt("max-sessions"),
		MaxWaitersPerLock:          v.GetInt("max-waiters-per-lock"),
		WatchHistoryBytes:          v.GetInt("watch-history-bytes"),
		ShutdownTimeout:            v.GetDuration("shutdown-timeout"),
		LeaveOnShutdown:            v.GetBool("leave-on-shutdown"),
		TLSCertFile:                v.GetString("tls-cert-file"),
		TLSKeyFile:                 v.GetString("tls-key-file"),
		TLSCAFile:                  v.GetString("tls-ca-file"),
		TLSVerifyClients:           v.GetBool("tls-verify-clients"),
		ConsoleAddr:                v.GetString("console-addr"),
		TLSMinVersion:              v.GetString("tls-min-version"),
		RateLimit:                  v.GetFloat64("rate-limit"),
		AuditLog:                   v.GetString("audit-log"),
		EnablePprof:                v.GetBool("enable-pprof"),
		UI:                         v.GetBool("ui"),
		ACL:                        v.GetBool("acl"),
		MaxSessionsPerToken:        v.GetInt("max-sessions-per-token"),
		MaxWatchesPerToken:         v.GetInt("max-watches-per-token"),
		MaxWatchesPerAddr:          v.GetInt("max-watches-per-address"),
		AgentToken:                 v.GetString("agent-token"),
		WaitWhenRemoved:            v.GetBool("wait-when-removed"),
	}
	var err error
	if c.InitialCluster, err = ParseMembers("initial-cluster", v.GetString("initial-cluster")); err != nil {
		return Config{}, err
	}
	if c.RaftPeerAddrs, err = ParseMembers("raft-peer-addrs", v.GetString("raft-peer-addrs")); err != nil {
		return Config{}, err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// checkKeys refuses config-file keys that are not flags, so that typos never pass silently.
func checkKeys(v *viper.Viper, fs *pflag.FlagSet) error {
	var unknown []string
	for _, k := range v.AllKeys() {
		if fs.Lookup(k) == nil {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("config: unknown setting(s) in %s: %s", v.ConfigFileUsed(), strings.Join(unknown, ", "))
	}
	return nil
}

func splitList(in []string) []string {
	var out []string
	for _, s := range in {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// ParseMembers parses "id=host:port,id=host:port" into a map; flag names the setting in errors.
func ParseMembers(flag, s string) (map[string]string, error) {
	out := make(map[string]string)
	for _, part := range splitList([]string{s}) {
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("config: --%s: %q is not id=host:port", flag, part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("config: --%s: %q: %w", flag, part, err)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("config: --%s: id %q appears twice", flag, id)
		}
		out[id] = addr
	}
	return out, nil
}

// Validate checks the settings and says which one is wrong.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if c.ID == "" || strings.ContainsAny(c.ID, " \t/=,") {
		bad("--id %q must be non-empty, without spaces, '/', '=' or ','", c.ID)
	}
	if c.DataDir == "" {
		bad("--data-dir is required")
	}
	if c.LogStore != "" && c.LogStore != "boltdb" && c.LogStore != "wal" {
		bad("--log-store %q must be wal or boltdb (or empty: what the data dir holds, wal for a new one)", c.LogStore)
	}
	for flag, addr := range map[string]string{"http-addr": c.HTTPAddr, "raft-addr": c.RaftAddr} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("--%s %q: %v", flag, addr, err)
		}
	}
	for flag, addr := range map[string]string{"advertise-http": c.AdvertiseHTTP, "advertise-raft": c.AdvertiseRaft} {
		if addr == "" {
			continue
		}
		if host, _, err := net.SplitHostPort(addr); err != nil {
			bad("--%s %q: %v", flag, addr, err)
		} else if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			bad("--%s %q must be an address others can reach, not a wildcard", flag, addr)
		}
	}
	for _, a := range []struct{ bind, adv, flag string }{{c.HTTPAddr, c.AdvertiseHTTP, "http"}, {c.RaftAddr, c.AdvertiseRaft, "raft"}} {
		if host, _, err := net.SplitHostPort(a.bind); err == nil && a.adv == "" {
			if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
				bad("--%s-addr %q binds a wildcard: give --advertise-%s with an address others can reach", a.flag, a.bind, a.flag)
			}
		}
	}
	if len(c.InitialCluster) > 0 && len(c.Join) > 0 {
		bad("give --initial-cluster or --join, not both")
	}
	if len(c.InitialCluster) > 0 {
		if _, ok := c.InitialCluster[c.ID]; !ok {
			bad("--initial-cluster does not list this node's --id %q", c.ID)
		}
	}
	switch strings.ToLower(c.LogLevel) {
	case "trace", "debug", "info", "warn", "error":
	default:
		bad("--log-level %q is not one of trace, debug, info, warn, error", c.LogLevel)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("--log-format %q is not text or json", c.LogFormat)
	}
	for flag, d := range map[string]time.Duration{"heartbeat-timeout": c.HeartbeatTimeout,
		"election-timeout": c.ElectionTimeout, "leader-lease-timeout": c.LeaderLeaseTimeout,
		"snapshot-interval": c.SnapshotInterval, "shutdown-timeout": c.ShutdownTimeout} {
		if d < 5*time.Millisecond {
			bad("--%s %v is too short", flag, d)
		}
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		bad("--leader-lease-timeout %v must not exceed --heartbeat-timeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.SnapshotThreshold == 0 {
		bad("--snapshot-threshold must be positive")
	}
	if c.MaxSnapshotBytes < 1<<20 {
		bad("--max-snapshot-bytes %d is below 1 MiB", c.MaxSnapshotBytes)
	}
	if c.MaxBodyBytes < 1024 {
		bad("--max-body-bytes %d is below 1024", c.MaxBodyBytes)
	}
	errs = append(errs, c.validateEdge()...)
	if c.MaxSessions < 0 || c.MaxWaitersPerLock < 0 {
		bad("--max-sessions and --max-waiters-per-lock must not be negative")
	}
	if c.WatchHistoryBytes < 64<<10 || c.WatchHistoryBytes > 1<<30 {
		bad("--watch-history-bytes %d must lie between 65536 and 1073741824", c.WatchHistoryBytes)
	}
	if c.MaxSessionsPerToken < 0 {
		bad("--max-sessions-per-token %d must be 0 (unlimited) or more", c.MaxSessionsPerToken)
	}
	if c.MaxWatchesPerToken < 0 || c.MaxWatchesPerAddr < 0 {
		bad("--max-watches-per-token and --max-watches-per-address must be 0 (unlimited) or more")
	}
	errs = append(errs, c.validateTLS()...)
	if c.RateLimit < 0 || c.RateLimit > 1e6 {
		bad("--rate-limit %v must lie between 0 (off) and 1000000 requests per second", c.RateLimit)
	}
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errors.Join(errs...)
}

// validateEdge checks the bounds on what a client can make the API spend before it is
// authenticated (docs/security.md, "What an unauthenticated client can cost").
func (c *Config) validateEdge() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 1<<20 {
		bad("--max-header-bytes %d must lie between 1024 and 1048576: a request line with a 256-byte lock name, percent-encoded, needs about 1 KiB", c.MaxHeaderBytes)
	}
	if c.MaxConnections != 0 && (c.MaxConnections < 16 || c.MaxConnections > 1<<20) {
		bad("--max-connections %d must be 0 (no limit) or between 16 and 1048576: every waiting acquire and blocking query holds one, and other nodes forward over them too", c.MaxConnections)
	}
	if c.MaxRaftHandshakes != 0 && (c.MaxRaftHandshakes < 16 || c.MaxRaftHandshakes > 1<<20) {
		bad("--max-raft-handshakes %d must be 0 (no limit) or between 16 and 1048576: peers reconnecting at once need several each", c.MaxRaftHandshakes)
	}
	for flag, d := range map[string]time.Duration{"header-read-timeout": c.HeaderReadTimeout, "body-read-timeout": c.BodyReadTimeout} {
		if d < 100*time.Millisecond || d > 10*time.Minute {
			bad("--%s %v must lie between 100ms and 10m", flag, d)
		}
	}
	return errs
}

// validateTLS checks that the TLS settings are given together: a certificate needs its key and
// a CA (nodes check each other against it), and the CA and client verification need TLS on.
func (c *Config) validateTLS() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("config: "+format, args...)) }
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("--tls-cert-file and --tls-key-file go together: give both or neither")
	}
	on := c.TLS()
	if on && c.TLSCAFile == "" {
		bad("--tls-ca-file is required with --tls-cert-file: nodes verify each other against it")
	}
	if !on && c.TLSCertFile == "" && c.TLSKeyFile == "" {
		if c.TLSCAFile != "" {
			bad("--tls-ca-file needs --tls-cert-file and --tls-key-file")
		}
		if c.TLSVerifyClients {
			bad("--tls-verify-clients needs --tls-cert-file, --tls-key-file and --tls-ca-file")
		}
	}
	if c.ConsoleAddr != "" {
		if _, _, err := net.SplitHostPort(c.ConsoleAddr); err != nil {
			bad("--console-addr %q: %v", c.ConsoleAddr, err)
		}
		if !on || !c.ACL {
			bad("--console-addr needs --tls-cert-file, --tls-key-file, --tls-ca-file and --acl: it asks for no client certificate, so a token must authenticate every API call there")
		}
	}
	if c.TLSMinVersion != "1.2" && c.TLSMinVersion != "1.3" {
		bad("--tls-min-version %q must be 1.2 or 1.3", c.TLSMinVersion)
	}
	if on {
		for _, j := range c.Join {
			if strings.HasPrefix(strings.ToLower(j), "http://") {
				bad("--join %q: with TLS, members are reached over HTTPS (give https:// or no scheme)", j)
			}
		}
	}
	return errs
}

// TLS reports whether the node serves TLS (certificate and key given).
func (c *Config) TLS() bool { return c.TLSCertFile != "" && c.TLSKeyFile != "" }

// AdvertisedHTTP returns the HTTP address to publish: --advertise-http, else --http-addr.
func (c *Config) AdvertisedHTTP() string {
	if c.AdvertiseHTTP != "" {
		return c.AdvertiseHTTP
	}
	return c.HTTPAddr
}
