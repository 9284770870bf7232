// Package nemesis injects faults into a running cluster on a schedule and records each one as a
// start and a stop op in the history, so checkers and reports can relate operations to faults.
//
// Faults: kill (SIGKILL the leader or a random node, restart it later), restart (SIGTERM
// instead: the node hands leadership over and snapshots before it exits), restart-all (SIGTERM to
// every node at once, then start them all: the whole cluster comes back from its snapshots),
// pause (SIGSTOP the leader or a random node for longer than both the election timeout and the
// session TTL, then SIGCONT),
// partition (isolate the leader, split majority from minority, or a bridge where one node sees
// both halves), client-pause (a lock holder stops, renewals included, for longer than its TTL
// before writing with its old token), churn (repeated leadership transfers), clock (leadership
// handed across skewed clocks during a lock-delay) and delay-dup (the Go-client workers' acquire
// requests held back, or duplicated with the first answer lost, arriving 0.5–2 TTLs late); the
// disk faults, disk-loss and restore; membership (the spare added as a non-voter and
// promoted, a voter removed and replaced by a new node at its addresses, leadership moved,
// the spare removed) and upgrade (the nodes rolled from an old build to the new one, and back
// where allowed, with the features each member enabled read after every step, and a
// downgrade after they were enabled that must be refused). One fault is active at a time;
// the schedule is drawn from a seeded random source.
//
// The package imports cluster, history, proxy, workload and the standard library.
package nemesis
