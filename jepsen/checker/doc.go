// Package checker judges a jepsen history of raftlock operations.
//
// Each checker takes the recorded ops (package history) and returns a Result with its figures
// and the first few violations, each quoted with the ops that show it:
//
//   - Linearizability: porcupine, one partition per lock, against a model of a lock whose
//     sessions may expire at any moment and whose grants carry strictly growing tokens.
//   - Fencing: what the fenced resource accepted.
//   - TokenOrder: tokens of a lock are unique per grant and grow in real-time order.
//   - Durability: no acknowledged release or destroy, and no lost session, is undone later.
//   - Expiry: no lock is handed on before its holder's TTL ran out, and a dead holder's lock
//     reaches a waiter soon after.
//   - Liveness: once every fault healed, every lock can be acquired within a bound.
//   - Convergence: every node ends with the same state, no node panicked, and every node
//     exited gracefully when the whole cluster got SIGTERM at once.
//   - Belief: what the Go-client workers believed agrees with each other and with the server.
//   - HeldByNobody: no lock stays held, for longer than a TTL, by a Go-client session in which
//     no worker holds or asks for it.
//   - Semaphores: at most a semaphore's limit of permits believed, and of writers accepted by
//     its resource, at once; tokens distinct.
//   - RWLocks: an exclusive holder overlaps no other holder, in belief or at the resource; no
//     writer starves within the liveness bound.
//   - Operator: every membership change and upgrade step succeeded, and no feature of the new
//     build was enabled while a member ran the old one.
//
// SyntheticCases holds small histories, good and broken, that prove each checker bites.
// The package imports history, api and porcupine only.
package checker
