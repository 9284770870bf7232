// Package cluster runs a raftlock cluster as separate `raftlock agent` processes on 127.0.0.1
// and controls them the way faults do: SIGKILL and restart, SIGSTOP and SIGCONT, graceful stop.
//
// Every node gets its own data directory and log file under the run directory, and dials its
// peers' Raft ports through a proxy.Mesh so partitions can be injected. The package also reads
// the cluster through its HTTP API: leader lookup, readiness, and each node's own (stale) lock and
// session tables for the convergence check. With Options.FaultFS each data directory is a
// faultfs mount, so that power cuts and disk faults can be injected; with Options.Secure it
// makes the run's certificates with tlsutil. It imports api, checker (for NodeState), faultfs,
// proxy and tlsutil; never the server packages.
package cluster
