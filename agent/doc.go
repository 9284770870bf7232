// Package agent assembles a runnable raftlock server from a config.Config: it binds the
// listeners, starts a cluster.Node and serves the httpapi in front of it, and shuts both down
// in order. It also runs the in-process development cluster of `raftlock dev`, which the tests
// of the other packages use too.
//
// It imports config, cluster, httpapi, fsm, tlsutil and internal/version; cmd/raftlock, bench
// (for in-process clusters) and the tests' internal/devtest import it.
package agent
