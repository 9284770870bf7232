// Package cluster runs a raftlock cluster as separate `raftlock agent` processes on 127.0.0.1
// and controls them the way faults do: SIGKILL and restart, SIGSTOP and SIGCONT, graceful stop.
//
// Every node gets its own data directory and log file under the run directory, and dials its
// peers' Raft ports through a proxy.Mesh so partitions can be injected. The package also reads
// the cluster through its HTTP API: leader lookup, readiness, and each node's own (stale) lock and
// session tables for the convergence check. It imports api, checker (for NodeState), proxy and
// the standard library; never the server packages.
package cluster
