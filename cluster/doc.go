// Package cluster runs one raftlock node: hashicorp/raft over TCP with a log and stable store
// on disk, fsynced before an entry counts (raft-wal by default, raft-boltdb/v2 with
// Config.LogStore "boltdb"; both keep their metadata in bbolt), and file snapshots whose
// directories are fsynced too, replicating the fsm package's lock state machine.
//
// A Node proposes commands and reports an Apply whose outcome is unknown as ErrUnknownOutcome,
// never as a failure. On the leader it keeps one expiry timer per session (armed only after a
// Barrier once leadership is gained, restarted at the full TTL, cleared on loss), acknowledges
// renewals only after a leadership confirmation that began after the renewal arrived (shared by
// concurrent renewals), and ends lock-delays with a timer too. Linearizable reads confirm
// leadership after the read arrived (see ReadBarrier for why no index wait is needed).
// Blocked acquires and blocking queries are woken by the state machine as it applies the log.
//
// A node starting from a snapshot restores it beside raft's start, not before: raft scans its
// log and votes meanwhile, and reaches the state machine only once the snapshot is in. The
// entries raft reads while it starts are kept until it applies them, so that the log after the
// snapshot is read from the store once. A graceful Shutdown snapshots the applied state, so the
// next start replays no log.
//
// It imports fsm, api (for the join request), backup (for snapshot files) and tlsutil (for its
// handshaking listener); it never imports httpapi. With Config.TLS, Raft runs over mutual TLS and the node's own API calls
// over HTTPS; the agent builds the configurations.
package cluster
