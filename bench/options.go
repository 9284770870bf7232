package bench

import (
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/client"
)

// Workload names, in the order Run runs them.
const (
	Uncontended = "uncontended"
	Contended   = "contended"
	Semaphore   = "semaphore"
	RWLock      = "rwlock"
	Sessions    = "sessions"
	Failover    = "failover"
	// Watch is not part of "all": its many watchers need the nodes' --max-connections raised.
	Watch = "watch"
)

// Via values: which node the clients send their requests to first.
const (
	// ViaLeader puts the leader's endpoint first (found with GET /v1/cluster), so requests are
	// not forwarded; the figures then do not depend on which node happened to win the election.
	ViaLeader = "leader"
	// ViaFollower puts a follower first and keeps the clients there (client.WithoutLeaderRouting),
	// so every write is forwarded to the leader.
	ViaFollower = "follower"
	// ViaGiven starts with the endpoints in the order given, as an ordinary program would
	// (whose client then moves to the leader's endpoint by itself).
	ViaGiven = "given"
)

// ErrViolation is returned by Run when a workload saw a safety violation (overlapping holds,
// a token that did not grow) or missed a must-hold figure (a lost session).
var ErrViolation = errors.New("bench: violation")

// ErrOptions is returned by Run for invalid options.
var ErrOptions = errors.New("bench: invalid options")

// AllWorkloads returns every workload name, in the order Run runs them.
func AllWorkloads() []string {
	return []string{Uncontended, Contended, Semaphore, RWLock, Sessions, Failover}
}

// ParseWorkloads parses a comma-separated list of workload names, or "all".
func ParseWorkloads(s string) ([]string, error) {
	var out []string
	for _, w := range strings.Split(s, ",") {
		w = strings.TrimSpace(strings.ToLower(w))
		switch {
		case w == "":
		case w == "all":
			out = append(out, AllWorkloads()...)
		case slices.Contains(AllWorkloads(), w) || w == Watch:
			out = append(out, w)
		default:
			return nil, fmt.Errorf("%w: unknown workload %q (want %s or all)", ErrOptions, w,
				strings.Join(AllWorkloads(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no workload", ErrOptions)
	}
	return out, nil
}

// Options configure Run. Zero fields take the defaults named on each.
type Options struct {
	// Endpoints of the cluster, e.g. "http://127.0.0.1:7001". Required.
	Endpoints []string
	// TLS is the clients' TLS configuration for https endpoints (CA, client certificate); nil
	// verifies against the system's roots.
	TLS *tls.Config
	// Token is the ACL token secret every client of the run sends (clusters with --acl); it
	// needs write on the bench's lock names (bench/...), and operator:read to find the leader.
	Token string
	// Dev is the in-process cluster behind Endpoints, if any. Without it, the failover workload
	// kills the leader's process, which must run on this machine, and only with KillProcesses.
	Dev *agent.Dev
	// Duration of each measurement; default 10s.
	Duration time.Duration
	// Warmup before each measurement; default 2s. Negative means none.
	Warmup time.Duration
	// Workloads to run; default all.
	Workloads []string
	// UncontendedClients lists the client counts of the uncontended workload; default 1, 8, 64.
	UncontendedClients []int
	// ContendedClients lists the client counts of the contended workload; default 8, 64.
	// Counts below 2 are skipped: one client has no one to hand over to.
	ContendedClients []int
	// KindClients lists the client counts of the semaphore and rwlock workloads; default 8, 64.
	// Counts below 2 are skipped.
	KindClients []int
	// SemaphoreLimit is the limit of the semaphore workload's semaphore; default a quarter of
	// the clients, at least 2.
	SemaphoreLimit int
	// Sessions is the number of sessions of the sessions workload; default 10,000.
	Sessions int
	// SessionTTL is the TTL of those sessions; default 10s. They are renewed at TTL/3.
	SessionTTL time.Duration
	// SessionWorkers is the number of goroutines that renew them, each in batches (32 more
	// create them); default 4.
	SessionWorkers int
	// FailoverTrials is the number of leader kills; default 5.
	FailoverTrials int
	// Watchers is the number of prefix watches of the watch workload, spread over the nodes;
	// default 1,000. WatchChanges is the number of changes it makes, one at a time; default 20.
	// WatchStale makes the watches stale reads, each answered by the node it is sent to;
	// otherwise followers forward them to the leader.
	Watchers     int
	WatchChanges int
	WatchStale   bool
	// WatchModes are how the watch workload's watchers watch, each measured in turn:
	// WatchStream (Server-Sent Events, one request per watcher) and WatchPoll (blocking
	// queries, one request per change); default both, streams first.
	WatchModes []string
	// WatchPrefixes is the number of prefixes each stream watches (default 1): the streams'
	// watchings are Watchers × WatchPrefixes, and the changes go round the prefixes.
	WatchPrefixes int
	// KillProcesses lets the failover workload SIGKILL and restart the nodes' processes when
	// they do not run in this process (Dev is nil); without it that workload is skipped, so
	// that measuring a cluster never kills its nodes unasked.
	KillProcesses bool
	// Supervised says that something else (systemd, say) restarts the killed processes of a
	// cluster outside this process: failover waits for that instead of starting the node again.
	Supervised bool
	// Via says which node requests go to first: ViaLeader (default), ViaFollower or ViaGiven.
	Via string
	// Version is the version of the running binary, reported with the figures.
	Version string
	// Progress, if set, receives a one-line status about four times a second while a
	// workload runs, and "" when it ends (to clear the line).
	Progress func(line string)
}

func (o Options) withDefaults() (Options, error) {
	if len(o.Endpoints) == 0 {
		return o, fmt.Errorf("%w: no endpoints", ErrOptions)
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 2 * time.Second
	}
	o.Warmup = max(o.Warmup, 0)
	if len(o.Workloads) == 0 {
		o.Workloads = AllWorkloads()
	}
	if len(o.UncontendedClients) == 0 {
		o.UncontendedClients = []int{1, 8, 64}
	}
	if len(o.ContendedClients) == 0 {
		o.ContendedClients = []int{8, 64}
	}
	if len(o.KindClients) == 0 {
		o.KindClients = []int{8, 64}
	}
	if o.Sessions == 0 {
		o.Sessions = 10_000
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = 10 * time.Second
	}
	if o.SessionWorkers == 0 {
		o.SessionWorkers = 4
	}
	if o.FailoverTrials == 0 {
		o.FailoverTrials = 5
	}
	if o.Watchers == 0 {
		o.Watchers = 1000
	}
	if o.WatchChanges == 0 {
		o.WatchChanges = 20
	}
	if len(o.WatchModes) == 0 {
		o.WatchModes = []string{WatchStream, WatchPoll}
	}
	if o.WatchPrefixes == 0 {
		o.WatchPrefixes = 1
	}
	for _, m := range o.WatchModes {
		if m != WatchStream && m != WatchPoll {
			return o, fmt.Errorf("%w: watch mode %q (want %q or %q)", ErrOptions, m, WatchStream, WatchPoll)
		}
	}
	if o.WatchPrefixes < 1 || o.WatchPrefixes > 1000 {
		return o, fmt.Errorf("%w: watch prefixes %d (want 1 to 1000)", ErrOptions, o.WatchPrefixes)
	}
	if o.Via == "" {
		o.Via = ViaLeader
	}
	var errs []error
	if o.Duration < 0 {
		errs = append(errs, fmt.Errorf("%w: negative duration", ErrOptions))
	}
	for _, c := range slices.Concat(o.UncontendedClients, o.ContendedClients, o.KindClients) {
		if c < 1 || c > 10_000 {
			errs = append(errs, fmt.Errorf("%w: client count %d (want 1 to 10000)", ErrOptions, c))
		}
	}
	if o.Watchers < 1 || o.Watchers > 100_000 || o.WatchChanges < 1 {
		errs = append(errs, fmt.Errorf("%w: watchers (1 to 100000) and watch changes must be positive", ErrOptions))
	}
	if o.SemaphoreLimit < 0 || o.SemaphoreLimit > 1000 {
		errs = append(errs, fmt.Errorf("%w: semaphore limit %d (want 1 to 1000)", ErrOptions, o.SemaphoreLimit))
	}
	if o.Sessions < 1 || o.SessionWorkers < 1 || o.FailoverTrials < 1 {
		errs = append(errs, fmt.Errorf("%w: sessions, session workers and failover trials must be positive", ErrOptions))
	}
	if o.SessionTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("%w: session TTL %s is below the server's minimum of 2s", ErrOptions, o.SessionTTL))
	}
	if o.Via != ViaLeader && o.Via != ViaFollower && o.Via != ViaGiven {
		errs = append(errs, fmt.Errorf("%w: via %q (want %s, %s or %s)", ErrOptions, o.Via, ViaLeader, ViaFollower, ViaGiven))
	}
	return o, errors.Join(errs...)
}

// clientOptions returns the options every client of the run is made with, then extra.
func (o Options) clientOptions(extra ...client.Option) []client.Option {
	var opts []client.Option
	if o.TLS != nil {
		opts = append(opts, client.WithTLSConfig(o.TLS))
	}
	if o.Token != "" {
		opts = append(opts, client.WithToken(o.Token))
	}
	return append(opts, extra...)
}
