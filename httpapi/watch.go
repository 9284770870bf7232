package httpapi

import (
	"net/http"
	"runtime"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/cluster"
)

// maxWatchChanges is how many changes one watch answer carries at most, unless one command
// made more (a command's changes are never split); the rest come at once on the next call.
const maxWatchChanges = 1000

// lockChanges is api.LockChanges with each lock as lockBody answers it.
type lockChanges struct {
	Locks []any  `json:"locks"`
	Index uint64 `json:"index"`
	Reset bool   `json:"reset"`
}

// watchLocks answers GET /v1/locks?prefix=P&index=N: the changes of the locks under P after
// index N that the caller may read, once there is at least one or the wait ends, with the
// index to watch from next; or, when N is 0 or older than the node's change log remembers,
// the whole prefix at once, flagged as a reset. Linearizable unless stale: the leader confirms
// its leadership once the answer is ready, and answers from its state as of then.
func (s *Server) watchLocks(c echo.Context, q query, prefix string) error {
	if q.stale {
		return s.watchAnswer(c, q, prefix)
	}
	if s.readHere(c) && !s.reads.leaderLacks() {
		// A follower answers the watch itself, with a read index after the wait.
		q.here = true
		c.Set(readHereKey, true)
		return s.watchAnswer(c, q, prefix)
	}
	return s.atLeader(c, func() error { return s.watchAnswer(c, q, prefix) })
}

func (s *Server) watchAnswer(c echo.Context, q query, prefix string) error {
	if _, err := s.caller(c); err != nil {
		return err
	}
	ch := s.waitChanges(c, prefix, q)
	// One change wakes every watch of its prefix at once: thousands of answers, each a
	// confirmation, an encoding and a write, that would all be runnable together and keep
	// Raft's own goroutines waiting for the CPU past its heartbeat timeout. A few at a time
	// take as long in all, and leave Raft its share.
	select {
	case s.answering <- struct{}{}:
		defer func() { <-s.answering }()
	case <-c.Request().Context().Done():
	}
	if c.Request().Context().Err() != nil {
		return nil // the client left: nobody reads the answer
	}
	if !q.stale {
		// One confirmation, after the wait: the changes read after it include every change
		// acknowledged before it, and a leader deposed during the wait fails here rather than
		// answer that nothing changed, when a newer leader may have changed the prefix.
		if err := s.reconfirm(c); err != nil {
			return err
		}
		ch = s.node.Changes(prefix, q.index, maxWatchChanges)
	}
	// The token may have changed during the wait: judge the answer by what it allows now.
	caller, err := s.caller(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.changesBody(caller, prefix, ch))
}

// maxAnswering is how many woken watches a node answers at once: enough to keep every
// processor busy while some wait on the network.
func maxAnswering() int { return 4 * runtime.GOMAXPROCS(0) }

// waitChanges holds a watch until the node's change log has a change under prefix after
// q.index that the caller may read (or must answer a reset), the wait elapses, the client
// leaves or, for a linearizable watch, the node stops leading; it returns what it found.
func (s *Server) waitChanges(c echo.Context, prefix string, q query) cluster.Changes {
	after := q.index
	var timer *time.Timer
	for {
		changed := s.node.WatchPrefix(prefix) // taken before the read, so no change is missed
		ch := s.node.Changes(prefix, after, maxWatchChanges)
		if ch.Reset || s.readable(c, ch) || timer != nil && !q.stale && !q.here && !s.node.IsLeader() {
			return ch
		}
		if timer == nil {
			if q.wait <= 0 {
				return ch
			}
			timer = time.NewTimer(q.wait)
			defer timer.Stop()
			s.metrics.blocking.Inc()
			defer s.metrics.blocking.Dec()
		}
		// Changes the caller may not read are passed over, not answered.
		after = ch.Next
		select {
		case <-changed:
		case <-timer.C:
			return ch
		case <-c.Request().Context().Done():
			return ch
		case <-s.closing.Done():
			return ch
		}
	}
}

// readable reports whether the caller may read one of the changes.
func (s *Server) readable(c echo.Context, ch cluster.Changes) bool {
	if !s.cfg.ACL {
		return len(ch.Locks) > 0
	}
	caller, err := s.caller(c)
	if err != nil {
		return true // answered (with the error) at once
	}
	for _, l := range ch.Locks {
		if caller.mayRead(l.Name) {
			return true
		}
	}
	return false
}

// changesBody is the answer to a watch: the changes the caller may read, or on a reset the
// whole prefix as the lock list shows it (held or awaited locks only; one left out is free).
func (s *Server) changesBody(caller *identity, prefix string, ch cluster.Changes) lockChanges {
	out := lockChanges{Locks: []any{}, Index: ch.Next, Reset: ch.Reset}
	if ch.Reset {
		for _, v := range s.node.FSM().LockViews(prefix) {
			if (v.Held || v.Waiters > 0) && caller.mayRead(v.Name) {
				out.Locks = append(out.Locks, s.lockViewBody(caller, v))
			}
		}
		return out
	}
	for _, v := range ch.Locks {
		if caller.mayRead(v.Name) {
			out.Locks = append(out.Locks, s.lockViewBody(caller, v))
		}
	}
	return out
}
