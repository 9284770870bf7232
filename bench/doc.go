// Package bench measures a raftlock cluster from the outside, the way its users see it: over
// HTTP, through the Go client. It is the engine of `raftlock bench`.
//
// Six workloads, each run for a fixed duration after a warm-up:
//
//   - uncontended: C clients, each with its own session, loop acquire+release on their own lock.
//     Figures: ops/s, the server processes' CPU time per op (from their /metrics), acquire and
//     release latency (p50, p99, max).
//   - contended: C clients block on ONE lock (long-poll acquires) and release it as soon as it
//     is granted. Figures: grants/s, handoff latency (release acknowledged → next holder's
//     grant received), fairness (max/min grants per client), FIFO order. It also checks
//     safety: no two holds overlap and tokens only grow. A violation fails the run.
//   - semaphore: C clients on ONE semaphore of limit L ask for a permit (long polls) and give it
//     back as soon as it is granted. Figures: grants/s, wait (acquire sent → grant), the most
//     holders at once. It checks that no more than L hold at once and that no token is granted
//     twice. A violation fails the run.
//   - rwlock: C clients on ONE read/write lock, an eighth of them writers, the others readers,
//     each giving it back as soon as it is granted. Figures: reads/s, writes/s, read and write
//     wait, the most readers at once. It checks that a writer is always alone and that no token
//     is granted twice. A violation fails the run.
//   - sessions: N sessions kept alive at TTL/3 by a pool of workers (not one goroutine per
//     session, so the bench's own footprint stays small). Figures: creation rate, renewals/s,
//     lost sessions (must be 0), the leader's CPU and RSS from its /metrics process metrics.
//   - failover: kill the leader and time until an acquire succeeds again, over several trials,
//     bringing the killed node back between trials. The nodes run in this process (--dev), or
//     as processes on this machine: the leader's is the process that listens on both its HTTP
//     and its Raft address (read from /proc); it gets SIGKILL and is started again with the
//     command line, directory and environment it had, unless a supervisor restarts it. That
//     needs Options.KillProcesses: measuring a cluster never kills its nodes unasked.
//
// RunState, apart from them, is the large-state workload: it starts three `raftlock agent`
// processes of its own, builds sessions, held locks and waiters (a million of each kind at
// the scale of docs/capacity.md) and measures memory per entry, a Raft snapshot and a backup
// with the longest stall of lock traffic during each, a fresh node's catch-up by snapshot, a
// start from disk and a restore.
//
// The report says what the figures were measured on, because on a shared virtual machine they
// move with it: the processor, the load average, the CPU time the hypervisor gave to other
// guests ("steal", per lock-workload row and for the run), and with an in-process cluster the
// time of a 4 KiB append + fsync beside the nodes' data, before and after the workloads.
//
// How safety is checked without server internals: a client records a hold from the moment the
// grant reaches it until just before it sends the release. The server's hold interval contains
// that one (it granted before the answer arrived and releases after the request leaves), so two
// recorded holds that overlap are a real double grant, never a false alarm.
//
// The package may import client, api, agent (to drive an in-process cluster: StartDev, Kill,
// Restart), prometheus/procfs and the standard library; it reads the servers' /metrics over
// plain HTTP and never imports a server package otherwise. Its tests also import config, only
// to shorten the election timeouts of their in-process cluster through agent.DevOptions.Tune,
// and jepsen/cluster, to run a cluster of processes.
//
// FIFO order cannot be checked exactly from outside (clients do not see the order in which the
// server queued them), so the contended workload reports FIFO inversions by the time each
// request was written to its connection, a heuristic; overlaps and token regressions, which it
// can check soundly, fail the run.
package bench
