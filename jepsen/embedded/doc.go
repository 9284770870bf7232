// Package embedded holds a Jepsen-style test of raftlock embedded in the processes that use
// it (package embed): each of three processes runs an embedded node and workers that hold
// locks through the node's in-process client, while the test kills processes (node and
// workers die together) and pauses them with SIGSTOP (node, workers and their timers freeze
// together). Each worker records what it believed to a history file of its process, on the
// machine's monotonic clock, which every process shares; the test merges the histories and
// runs the jepsen harness's belief checker on them.
//
// A worker believes it holds a lock from the first check after the call that took it, until
// the last check before it lets go or finds it lost. Each check, made just before the worker
// acts, is the one docs/embedding.md asks of a program that may pause: the hold's Context is
// not done and the session's Deadline is still ahead. A paused process cannot rely on its
// timers to have closed Done by the time it resumes; the deadline, on the monotonic clock, has
// passed all the same.
//
// The package has only tests; it imports embed, client and the harness's history and
// checker packages.
package embedded
