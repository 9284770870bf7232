// Package client is the Go client of raftlock: a connection to the cluster with leader
// failover, the primitives a correct lock holder needs, and beneath them the raw HTTP API.
//
//   - [Client] talks to any node of the cluster (every node answers every request), moves to
//     another endpoint on connection errors and 503 no_leader with jittered backoff, and reports
//     API errors as [*APIError] values that match the sentinel errors with errors.Is. Once an
//     answer names a leader, it asks its endpoints which node each is (GET /v1/health) and
//     sends its requests to the leader's, which saves the cluster the follower's forwarding
//     hop, 40–55 % of its CPU per write as measured ([WithoutLeaderRouting] keeps the order
//     given). Reads with [Stale] stay on the first endpoint given, off the leader. Its methods
//     are what a lock holder or observer needs: [Client.NewSession], [Client.GetLock],
//     [Client.Observe].
//   - [Session] is a lease with a TTL, renewed in the background. It keeps a conservative local
//     deadline (the send time of the last acknowledged renewal + TTL − margin, on the monotonic
//     clock; [Session.SafetyMargin] gives the arithmetic): [Session.Done] closes when the server
//     reports the session gone or when that deadline passes, so a holder stops believing it holds
//     its locks before the server can give them to someone else. [Session.Err] is set first, and
//     every Mutex and Election of the session forgets its hold before Done closes. The sessions
//     of one Client are renewed together, in batches, so a process may keep thousands of them.
//   - [Mutex] is a FIFO lock on a session. [Mutex.Token] is its fencing token: pass it to the
//     protected resource with every operation. Each Lock or TryLock call is one attempt on the
//     server; an attempt that ends without a hold is withdrawn in the background, and Unlock
//     fences the attempt that won, so no request delayed in the network can take the lock for a
//     session that does not know it holds it.
//   - [Semaphore] is a Mutex that up to N sessions hold at once, each under a token of its own:
//     "at most N workers run this".
//   - [RWMutex] is a read/write lock: sessions share it (RLock) or one holds it alone (Lock),
//     in arrival order, so that a waiting writer is never overtaken by later readers.
//   - [Election] elects one leader among candidates and lets anyone observe who leads, and
//     when nobody does.
//   - [Client.WatchPrefix] follows every lock under a prefix: the prefix as it stands, then
//     each change in log order, through leader changes and failed nodes, with a resync (told
//     apart from a change) whenever the cluster can no longer tell every change since.
//   - [Fence] is for the protected resource: it remembers the highest token seen per lock and
//     rejects operations that carry a lower one.
//   - [Raw], from [Client.Raw], is the HTTP API one method per endpoint (docs/api.md), for
//     tools, operators and tests: sessions it creates are never renewed, and locks it acquires
//     are never withdrawn or released for you.
//
// # Why the raw API is a type, not a package
//
// etcd keeps its primitives (package concurrency) apart from the raw API (package clientv3),
// so that a lease nobody keeps alive is not made by mistake. raftlock keeps the same apart
// with a type: the raw calls are methods of [Raw], not of [Client], so a session that is
// never renewed is made only by asking for Raw by name, while the common path stays short
// (client.New, c.NewSession, client.NewMutex, client.NewElection, client.NewFence,
// c.GetLock). A package of its own would not do better: the primitives need what a raw layer
// must not show its users — how many requests of an attempt may have reached a server, the
// numbered attempt fields of a release, the features the cluster has enabled, the batching
// renewer — and would have to export those or duplicate the transport; and the sentinel
// errors, which both layers return, would need a third package.
//
// # Errors
//
// Each error code of the API has one sentinel ([ErrLockHeld] for 409 lock_held, ...), which
// the [*APIError] of that code matches; the other sentinels name what the client found itself
// ([ErrSessionDeadline], [ErrLockLost], ...). Every error of the package reads "raftlock: " and
// what happened, with that prefix once however many of its errors one wraps. What the cluster
// supports the client learns from the cluster, never from the text of an error: numbered
// attempts from the features of GET /v1/cluster, and the batch renewal endpoint, which came
// before features, from the 404 or 405 that a server without it answers for its route.
//
// # Transport
//
// Every request goes through one http.RoundTripper: the client's own (many idle connections
// per node, TLS from [WithTLSConfig]), or the one given with [WithTransport], e.g. to reach a
// node in the same process without a network connection.
//
// A minimal lock holder:
//
//	c, err := client.New([]string{"http://127.0.0.1:7001", "http://127.0.0.1:7002"})
//	if err != nil { ... }
//	defer c.Close()
//	s, err := c.NewSession(ctx, client.WithTTL(15*time.Second))
//	if err != nil { ... }
//	defer s.Close(context.Background())
//	m := client.NewMutex(s, "jobs/nightly")
//	if err := m.Lock(ctx); err != nil { ... }
//	defer m.Unlock(context.Background())
//	doWork(m.Context(), m.Token()) // stop when m.Context() is done; send the token along
//
// Following every lock under a prefix:
//
//	for ev := range c.WatchPrefix(ctx, "jobs/") {
//		switch {
//		case ev.Err != nil:
//			log.Fatal(ev.Err) // e.g. a token that may not read the prefix
//		case ev.Resync:
//			replaceAll(ev.Locks) // every held or awaited lock; the others are free
//		default:
//			apply(ev.Lock) // one change, in log order; Held is false once released
//		}
//	}
//
// At most three at once:
//
//	sem := client.NewSemaphore(s, "jobs/reindex", 3)
//	if err := sem.Acquire(ctx); err != nil { ... }
//	defer sem.Release(context.Background())
//	doWork(sem.Context(), sem.Token())
//
// Many readers or one writer:
//
//	rw := client.NewRWMutex(s, "docs/handbook")
//	if err := rw.RLock(ctx); err != nil { ... } // or rw.Lock(ctx) to write
//	defer rw.RUnlock(context.Background())      // rw.Unlock after Lock
//	read(rw.Context(), rw.Token())
//
// The package imports only the standard library, the wire types of
// github.com/raftlock/raftlock/api and hclog; it never imports a server package.
package client
