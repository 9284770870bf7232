// Package workload drives raftlock the way the jepsen run needs: many workers, each with its own
// session kept alive in the background, take a few locks (try and blocking acquires), write to a
// fenced resource under their token, sometimes read the lock, and release.
//
// Every HTTP request is exactly one recorded op (no hidden retries), classified by what it proves:
// 2xx is ok; a refusal that applied nothing (409, 404 session_not_found, 400, 503 no_leader, or a
// request never fully sent) is fail; anything else (503 timeout, other 5xx, a connection lost or a
// client timeout after the request was sent) is info, an unknown outcome. A worker that sees an
// unknown outcome reads the lock to learn what happened, then abandons the session (destroying it
// until the destroy is definite), which bounds how long the unknown op can still take effect. For
// a lost acquire it may instead cancel the acquire's attempt until the cancel is definite,
// release a grant the cancel reports, and keep the session: the cancel bounds the acquire.
//
// Client workers hold locks through the Go client instead, behind HTTP proxies of their own
// (which a proxy.RequestFault can make delay and duplicate their acquires); some of them are
// cyclers, which keep one session for hundreds of fast Lock/Unlock cycles. A sampler reads the
// whole lock table four times a second, recorded as one read per lock.
//
// KindWorkers hold a semaphore or a read/write lock through the Go client and use a
// KindResource fenced by the rules of each.
//
// The Resource is a register per lock that accepts a write only with a token at least as high as
// the highest it accepted; IgnoreTokens turns it into the plain Redis-lock situation.
//
// The package imports api, client, history, proxy and the standard library.
package workload
