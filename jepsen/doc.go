// Package jepsen runs raftlock under faults the way Jepsen tests databases, and judges the result.
//
// A run builds the raftlock binary, starts a cluster of separate agent processes on 127.0.0.1
// (package cluster) whose Raft traffic flows through per-pair TCP proxies (package proxy), lets
// many client workers take locks and write to a fenced resource (package workload; the Go-client
// workers reach the nodes through HTTP proxies of their own, which can delay and duplicate their
// requests) while faults are injected on a schedule (package nemesis), records every operation
// with monotonic invoke and completion times (package history), and finally checks the history
// and the cluster's end state (package checker). Run ties these together; cmd/jepsen is its
// command-line runner.
//
// Imports point one way: jepsen → {cluster, nemesis, workload, checker} → history → api. Nothing
// here imports the server packages: the cluster is driven only through its HTTP API and signals.
package jepsen
