package client

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/api"
)

// watchWait is how long one request of WatchPrefix waits for a change before asking again.
const watchWait = time.Minute

// WatchEvent is one delivery of Client.WatchPrefix: one change of one lock, or a resync.
type WatchEvent struct {
	// Lock is, when Resync is false, the lock as the change left it: its ModifyIndex is the
	// change's log index, and Held is false once it was released.
	Lock api.Lock
	// Resync says that this event replaces all the watcher knew of the prefix: Locks holds
	// every held or awaited lock under it, and a lock not listed is free. The first event of a
	// watch is a resync (the prefix as it stands); a later one comes when the cluster could not
	// tell every change since the last event (the node asked no longer remembered them, or had
	// installed a snapshot in between), so that a change is never missed unknowingly.
	Resync bool
	Locks  []api.Lock
	// Index is the log index the watch has reached: the change's own on a change (as
	// Lock.ModifyIndex), the one the listed state is at least as new as on a resync.
	Index uint64
	// Err, set on the last event before the channel closes, says why the watch ended before
	// its context did: an error the cluster will answer again, such as a token that may not
	// read the prefix. Failures that pass (an unreachable node, a leader election) are retried
	// without an event.
	Err error
}

// WatchPrefix follows every lock whose name starts with prefix: first a resync with the
// prefix as it stands, then each change, in log order, as soon as it is applied. It holds one
// streamed watch (docs/api.md, "Streamed watches") on any node, follower or leader, and goes
// on from the index of the last event it delivered when a stream ends (a node failed, lost
// its leader, or was restored), through the next endpoint after a backoff, without missing a
// change or repeating one; when the cluster can no longer tell every change since, it delivers
// a resync instead. Against a cluster without streams (or with LongPoll) it uses the long poll
// (GET /v1/locks?prefix=&index=), with the same events. Reads are linearizable unless Stale is
// given: a stream's start is confirmed by the leader. Events wait for the reader: a reader that
// falls far behind may get a resync rather than every change. The channel is closed when ctx
// is done, or after an event with Err.
func (c *Client) WatchPrefix(ctx context.Context, prefix string, opts ...ReadOption) <-chan WatchEvent {
	return c.WatchPrefixFrom(ctx, prefix, 0, opts...)
}

// WatchPrefixFrom is WatchPrefix resumed after index, the Index of the last event a
// watcher handled (a CLI's `watch --index N`, a process restarted): its first event is the
// first change after index, or a resync when the cluster can no longer tell every change
// since. Index 0 is WatchPrefix.
func (c *Client) WatchPrefixFrom(ctx context.Context, prefix string, index uint64, opts ...ReadOption) <-chan WatchEvent {
	ch := make(chan WatchEvent)
	o := readOptionsOf(opts)
	go func() {
		defer close(ch)
		send := sender(ctx, ch)
		if !o.longPoll {
			reached, err := c.followStream(ctx, []string{prefix}, index, o, send)
			if !errors.Is(err, errNoStreams) {
				return
			}
			c.logger.Debug("no streamed watches; watching by long poll", "prefix", prefix, "index", reached)
			index = reached
		}
		c.longPollPrefix(ctx, prefix, index, opts, send)
	}()
	return ch
}

// longPollPrefix is WatchPrefixFrom by long poll: one request per answer.
func (c *Client) longPollPrefix(ctx context.Context, prefix string, index uint64, opts []ReadOption, send func(WatchEvent) bool) {
	for attempt := 0; ctx.Err() == nil; {
		ans, err := c.watchPrefix(ctx, prefix, index, opts)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !isTransient(err) {
				send(WatchEvent{Index: index, Err: err})
				return
			}
			c.logger.Debug("watch failed; asking again", "prefix", prefix, "index", index, "error", err)
			if !sleepCtx(ctx, c.backoff(attempt)) {
				return
			}
			attempt++
			continue
		}
		attempt = 0
		if ans.Index == 0 {
			// Every answer of a watch names an index; a server that ignores ?index answers
			// the plain list, at once, again and again.
			send(WatchEvent{Err: errorf("%w: the cluster answers no prefix watch (a version before them?)", ErrNotFound)})
			return
		}
		if ans.Reset {
			if !send(WatchEvent{Resync: true, Locks: nonNilLocks(ans.Locks), Index: ans.Index}) {
				return
			}
		} else {
			for _, l := range ans.Locks {
				if !send(WatchEvent{Lock: l, Index: l.ModifyIndex}) {
					return
				}
			}
		}
		index = max(index, ans.Index)
	}
}

// watchPrefix asks one prefix watch from index.
func (c *Client) watchPrefix(ctx context.Context, prefix string, index uint64, opts []ReadOption) (*api.LockChanges, error) {
	var ans api.LockChanges
	cl := c.readCall("/v1/locks", &ans, opts)
	cl.query.Set("prefix", prefix)
	cl.query.Set("index", strconv.FormatUint(index, 10))
	cl.query.Set("wait", watchWait.String())
	cl.wait = watchWait
	if _, err := c.do(ctx, cl); err != nil {
		return nil, err
	}
	return &ans, nil
}

func nonNilLocks(l []api.Lock) []api.Lock {
	if l == nil {
		return []api.Lock{}
	}
	return l
}
