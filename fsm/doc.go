// Package fsm is raftlock's deterministic lock state machine: sessions, locks with FIFO wait
// queues and fencing tokens (a lock may be a semaphore that several sessions hold at once, or
// a read/write lock with shared holds), the cluster's membership metadata, and the ACL state
// (tokens, policies, and the token that owns each session).
//
// Each rule has one file, which states it and its invariants at the top:
//
//   - acquire.go: acquiring, queueing, releasing and handing a lock on (fits, ready, grant,
//     ungrant, grantNext);
//   - attempts.go: the attempts an acquire names, and which of them have ended;
//   - delays.go: lock-delays after an expiry;
//   - features.go: the feature gate, every part of it (what a command needs, what Apply
//     drops, which snapshot format is written, what a restore refuses);
//   - invariants.go: the invariants of a lock entry, stated once and checked by Restore
//     (and, after every command, by the randomized tests);
//   - lock.go: how a lock entry stores its grants (one token-ordered list) and how a session
//     lists the locks it holds;
//   - apply.go: the dispatch of commands and a session's life; acl.go: ACL commands;
//     snapshot.go and snapshot_lock.go: the snapshot format.
//
// Every change is a Command, encoded compactly (a version byte, a type byte, then varints and
// length-prefixed strings) and applied through the raft.FSM interface. Apply never reads a
// clock, never draws a random number and never lets map order reach the state or a result: the
// leader writes the time it read into each command that needs one, and session ids are chosen
// by the proposer. Applying the same log therefore yields the same state, and byte-identical
// snapshots, on every node. So are a token's accessor id and secret: a command carries only the
// secret's SHA-256 hash (HashSecret), which is all the state keeps. Authorizer is the pure
// policy matching that the API applies to a token's policies.
//
// Version skew is handled here, in one place: a change to what the log or a snapshot may hold,
// or to how a command applies, is a Feature. An EnableFeatures command, which the leader
// proposes only once every member supports a feature, turns it on for good; until then no
// entry uses it and snapshots keep the older format, so a cluster upgrades one node at a time.
// A node that meets an entry it cannot apply (ErrNewerFormat, or a feature it lacks) stops
// rather than skip it.
//
// Business outcomes (lock held, not holder, unknown session) are returned as a Result value from
// Apply, never as errors: an error result means the command could not be decoded.
//
// The package imports nothing from the project and nothing of raft beyond its FSM interface.
// Whoever embeds the FSM learns about grants, session ends and lock changes through an Observer,
// called after the state lock is released so that it may read the state back.
package fsm
