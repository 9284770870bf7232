package embed

import (
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config configures an embedded node. ID, DataDir, RaftAddr (or RaftListener) and one of
// Peers or Join are needed; the rest have defaults.
type Config struct {
	// ID is the node's unique, stable name within its cluster (e.g. "n1"); it must not change
	// across restarts on the same DataDir.
	ID string
	// DataDir holds the node's Raft log and snapshots; it must survive restarts (a persistent
	// volume per replica). One node at a time may use it: a second Start on it fails with
	// cluster.ErrDataDirInUse.
	DataDir string
	// RaftAddr is the address to listen on for the other members (Raft, and their calls to
	// this node's API), e.g. "0.0.0.0:7101"; ignored when RaftListener is set.
	RaftAddr string
	// RaftListener, if set, is a bound listener to use instead of RaftAddr (tests bind port 0).
	RaftListener net.Listener
	// AdvertiseAddr is the host:port the other members reach this node at; default the bound
	// address, which must then not be a wildcard such as 0.0.0.0.
	AdvertiseAddr string

	// Peers maps every member of a new cluster, this one included, to its Raft address. It
	// bootstraps the cluster only when DataDir holds no Raft state yet, so the same Config
	// restarts a node; give every replica the same Peers.
	Peers map[string]string
	// Join lists Raft addresses of members of a running cluster to join through, instead of
	// Peers: Start returns once one of them has added this node.
	Join []string

	// TLS, with its three files set, runs Raft and the members' calls to each other's API over
	// mutual TLS with node certificates of one CA (`raftlock tls cert create --node`), and
	// HTTPAddr's API over HTTPS.
	TLS TLSFiles
	// ACL enforces ACL tokens on every request to this node's API, the in-process client's
	// included (docs/acl.md); every member must agree.
	ACL bool
	// Token is the ACL token of this node: sent with its own calls to the other members (it
	// needs operator:write), and the token of Node.Client.
	Token string

	// LogStore is the Raft log store of a new DataDir: "wal" (default) or "boltdb".
	LogStore string
	// Logger receives the node's logs; default discards them.
	Logger hclog.Logger

	// HTTPAddr, if set, also serves the HTTP API on this address (HTTPS with TLS), for the
	// raftlock CLI and clients in other processes. Default: no API for anyone but the members;
	// Node.Handler serves it on a mux of the program's own.
	HTTPAddr string

	// ElectionTimeout is how long followers go without hearing from the leader before they
	// elect another; it also sets Raft's heartbeat and leader lease. Default 500ms; every
	// member should use the same.
	ElectionTimeout time.Duration
	// MinSessionTTL is the shortest session TTL the node accepts; default 2s. Every member must
	// use the same: a follower checks a request, then the leader checks it again.
	MinSessionTTL time.Duration

	// Metrics, if set, also receives the node's raftlock_* metrics (those its /metrics serves
	// but Go's and the process's, which the program's registry has), so that the program's own
	// metrics endpoint serves them: prometheus.DefaultRegisterer, or a registry of its own.
	// Start fails if one is already registered there: nodes that share a registry each need a
	// label of their own (prometheus.WrapRegistererWith). Close unregisters them.
	Metrics prometheus.Registerer
}

// TLSFiles names the PEM files of a node's TLS: its certificate and key, and the CA bundle.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// on reports whether TLS is configured.
func (f TLSFiles) on() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("embed: config: "+format, args...)) }
	if c.ID == "" || strings.ContainsAny(c.ID, " \t/=,") {
		bad("ID %q must be non-empty, without spaces, '/', '=' or ','", c.ID)
	}
	if c.DataDir == "" {
		bad("DataDir is required")
	}
	if c.RaftAddr == "" && c.RaftListener == nil {
		bad("RaftAddr (or RaftListener) is required")
	}
	switch {
	case len(c.Peers) > 0 && len(c.Join) > 0:
		bad("Peers and Join exclude each other: Peers bootstraps a new cluster, Join enters a running one")
	case len(c.Peers) == 0 && len(c.Join) == 0:
		bad("Peers (every member of a new cluster) or Join (members of a running one) is required")
	case len(c.Peers) > 0:
		if _, ok := c.Peers[c.ID]; !ok {
			bad("Peers does not name this node %q", c.ID)
		}
	}
	if c.TLS.on() && (c.TLS.CertFile == "" || c.TLS.KeyFile == "" || c.TLS.CAFile == "") {
		bad("TLS needs CertFile, KeyFile and CAFile together")
	}
	if c.ElectionTimeout < 0 || c.MinSessionTTL < 0 {
		bad("ElectionTimeout and MinSessionTTL must not be negative")
	}
	return errors.Join(errs...)
}

// ParsePeers parses "id=host:port,id=host:port" (what a --peers flag holds) into Config.Peers.
// It is config.ParseMembers's rule; package config is not imported for it, since it would link
// viper and pflag into every program that embeds a node.
func ParsePeers(s string) (map[string]string, error) {
	out := make(map[string]string)
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		id, addr, ok := strings.Cut(part, "=")
		if !ok || id == "" {
			return nil, fmt.Errorf("embed: peers: %q is not id=host:port", part)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("embed: peers: %q: %w", part, err)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("embed: peers: id %q appears twice", id)
		}
		out[id] = addr
	}
	if len(out) == 0 {
		return nil, errors.New("embed: peers: empty")
	}
	return out, nil
}

// advertised returns the address the other members reach the node at: AdvertiseAddr, or the
// bound one if it is not a wildcard.
func (c *Config) advertised(ln net.Listener) (string, error) {
	if c.AdvertiseAddr != "" {
		return c.AdvertiseAddr, nil
	}
	addr := ln.Addr().String()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("embed: raft address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		return "", fmt.Errorf("embed: the Raft listener is bound to %s, which other members cannot dial: set AdvertiseAddr", addr)
	}
	return addr, nil
}
