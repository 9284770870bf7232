package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

// Linearizable reads on followers. A follower answers a linearizable read of the locks itself:
// it asks the leader for a read index (readIndexPath) in a round that began after the read
// arrived, one round for every read waiting then, waits until its state machine has applied
// up to that index, and reads its own state. The leader answers the index only after
// confirming its leadership as for its own reads (cluster.Node.ReadIndex). A leader that does
// not serve the route (an older version, during a rolling upgrade) gets the read forwarded
// whole, as before. The argument is in docs/safety.md.

// readIndexPath is the members' route for a read index: GET, marked as forwarded
// (X-Raftlock-Forwarded), which with TLS only a connection with a node certificate may carry.
const readIndexPath = "/v1/internal/read-index"

// readIndexAnswer is the leader's answer on readIndexPath.
type readIndexAnswer struct {
	// Index is the read index: a node that has applied up to it may answer a linearizable
	// read that arrived before the leader was asked.
	Index uint64 `json:"index"`
}

// errForwardRead says that the leader serves no read index (an older version): the read goes
// to the leader whole, as before.
var errForwardRead = errors.New("httpapi: the leader serves no read index; forward the read")

// lackingFor is how long a follower remembers that a leader serves no read index, before it
// asks it again (it may have been upgraded in place).
const lackingFor = 30 * time.Second

// readIndexHandler answers a member's request for a read index, on the leader.
func (s *Server) readIndexHandler(c echo.Context) error {
	if c.Request().Header.Get(api.HeaderForwarded) == "" {
		return forbidden("%s is for the members of the cluster only", readIndexPath)
	}
	if !s.node.IsLeader() {
		return noLeader("this node is not the leader; ask the leader for a read index")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.CommandTimeout)
	defer cancel()
	index, err := s.node.ReadIndex(ctx)
	if err != nil {
		return fromClusterError(err)
	}
	return c.JSON(http.StatusOK, readIndexAnswer{Index: index})
}

// readIndexer asks the leader for read indexes on a follower, in shared rounds: a read joins
// the next round, which starts only after the one in flight finished, so every read waiting
// meanwhile shares one request to the leader, and each read's round began after it arrived.
type readIndexer struct {
	s *Server

	mu      sync.Mutex
	next    *readRound
	running bool
	// lacking is the leader (id and address) that answered that it serves no read index,
	// until lackingUntil.
	lacking      string
	lackingUntil time.Time
}

// readRound is one request to the leader, and its outcome for every read that joined it.
type readRound struct {
	done  chan struct{}
	index uint64
	err   error // errForwardRead, or an *apiError
}

// readIndex returns a read index from a round that began after the call, errForwardRead if
// the leader serves none, or an *apiError. A read that finds no round in flight runs its own
// at once, on its own goroutine (one hand-over fewer, for a lone reader); the reads that
// arrive meanwhile share the next.
func (ri *readIndexer) readIndex(ctx context.Context) (uint64, error) {
	ri.mu.Lock()
	if !ri.running && ri.next == nil {
		ri.running = true
		ri.mu.Unlock()
		index, err := ri.ask()
		ri.mu.Lock()
		next := ri.next
		ri.next = nil
		if next == nil {
			ri.running = false
		} else {
			go ri.run(next)
		}
		ri.mu.Unlock()
		return index, err
	}
	if ri.next == nil {
		ri.next = &readRound{done: make(chan struct{})}
	}
	r := ri.next
	if !ri.running {
		ri.running = true
		ri.next = nil
		go ri.run(r)
	}
	ri.mu.Unlock()
	select {
	case <-r.done:
		return r.index, r.err
	case <-ctx.Done():
		return 0, readTimeout()
	}
}

func (ri *readIndexer) run(r *readRound) {
	for r != nil {
		r.index, r.err = ri.ask()
		close(r.done)
		ri.mu.Lock()
		r, ri.next = ri.next, nil
		if r == nil {
			ri.running = false
		}
		ri.mu.Unlock()
	}
}

// ask runs one round: it finds the leader (waiting up to LeaderWait for one) and asks it.
func (ri *readIndexer) ask() (uint64, error) {
	s := ri.s
	ctx, cancel := context.WithTimeout(s.closing, s.cfg.CommandTimeout)
	defer cancel()
	deadline := time.Now().Add(s.cfg.LeaderWait)
	for {
		if s.node.IsLeader() {
			index, err := s.node.ReadIndex(ctx)
			if err != nil {
				return 0, fromClusterError(err)
			}
			return index, nil
		}
		id, addr := s.node.Leader()
		if id != "" && id != s.node.ID() && addr != "" {
			index, err := ri.askLeader(ctx, id, addr)
			var e *apiError
			if !errors.As(err, &e) || e.body.Error.Code != api.CodeNoLeader || time.Now().After(deadline) {
				return index, err
			}
			// The node asked no longer leads (or could not confirm it): ask the next
			// leader, within the wait for one, as a forward would find it.
		} else if time.Now().After(deadline) {
			return 0, noLeader("no leader is known right now")
		}
		select {
		case <-ctx.Done():
			return 0, noLeader("no leader is known right now")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// askLeader asks the leader with id and HTTP address addr for a read index.
func (ri *readIndexer) askLeader(ctx context.Context, id, addr string) (uint64, error) {
	s := ri.s
	key := id + " " + addr
	ri.mu.Lock()
	lacking := ri.lacking == key && time.Now().Before(ri.lackingUntil)
	ri.mu.Unlock()
	if lacking {
		return 0, errForwardRead
	}
	s.metrics.readIndexRounds.Inc()
	if s.node.ChannelEnabled() {
		// Straight to the leader's node over the peer channel, no HTTP request inside.
		index, err := s.node.LeaderReadIndex(ctx)
		switch {
		case err == nil:
			return index, nil
		case errors.Is(err, cluster.ErrChannelUnavailable), errors.Is(err, cluster.ErrChannelUnknownKind):
			// Nothing was asked: ask below, as an HTTP request.
		case errors.Is(err, cluster.ErrNotLeader):
			return 0, noLeader("the leader could not confirm its leadership for a read index")
		default:
			s.log.Debug("read index: asking the leader over the peer channel failed", "leader", id, "error", err)
			return 0, readTimeout()
		}
	}
	status, body, _, err := s.memberRequest(ctx, id, addr, http.MethodGet, readIndexPath, nil, nil)
	if err != nil {
		s.log.Debug("read index: asking the leader failed", "leader", id, "error", err)
		if errors.Is(err, errNotSent) {
			return 0, noLeader("the leader could not be reached for a read index")
		}
		return 0, readTimeout()
	}
	switch status {
	case http.StatusOK:
		var a readIndexAnswer
		if err := json.Unmarshal(body, &a); err != nil || a.Index == 0 {
			return 0, newError(http.StatusBadGateway, api.CodeInternal, "the leader's read index is not readable")
		}
		return a.Index, nil
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnauthorized, http.StatusForbidden:
		// An older leader knows no such route (404, or 401 under ACL before routing), or does
		// not take this node for a member (403): the read goes to it whole, as a client's.
		ri.mu.Lock()
		ri.lacking, ri.lackingUntil = key, time.Now().Add(lackingFor)
		ri.mu.Unlock()
		return 0, errForwardRead
	}
	var eb api.ErrorBody
	if err := json.Unmarshal(body, &eb); err == nil && eb.Error.Code != "" {
		e := newError(status, eb.Error.Code, "%s", eb.Error.Message)
		if status == http.StatusServiceUnavailable {
			e.retryAfter = "1"
		}
		return 0, e
	}
	return 0, noLeader("the leader answered %d to a read index", status)
}

// readTimeout is the answer to a linearizable read that did not learn, or reach, a read index
// in time: nothing is known about the state then, and the client asks again.
func readTimeout() *apiError {
	e := newError(http.StatusServiceUnavailable, api.CodeTimeout,
		"the read could not be confirmed current in time (the leader did not answer, or this node is behind); ask again")
	e.retryAfter = "1"
	return e
}

// linearize makes this node's state current for a linearizable read that arrived before the
// call: on the leader, a read barrier (ReadBarrier); on a follower, a read index from the
// leader and a wait until this node has applied up to it. After it, the state holds every
// write acknowledged before the read arrived, and everything any node had answered from.
// errForwardRead when the leader serves no read index; else an *apiError.
func (s *Server) linearize(c echo.Context) error {
	if s.node.IsLeader() {
		return s.readBarrier(c)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.CommandTimeout)
	defer cancel()
	index, err := s.reads.readIndex(ctx)
	if err != nil {
		return err
	}
	if err := s.node.WaitApplied(ctx, index); err != nil {
		if ctx.Err() != nil {
			return readTimeout()
		}
		return fromClusterError(err)
	}
	s.metrics.followerReads.Inc()
	return nil
}

// readHereKey marks a request whose linearizable read this follower answers itself (lockRead).
const readHereKey = "raftlock.readHere"

// reconfirm makes the state current again for a read already under way (after a blocking
// query's wait): on the leader that answers it, a read barrier, which fails (503) once the
// node no longer leads, as before; on a follower that answers it itself, linearize again, and
// a leader that serves no read index by now gets it answered 503, to be asked again.
func (s *Server) reconfirm(c echo.Context) error {
	if here, _ := c.Get(readHereKey).(bool); !here {
		return s.readBarrier(c)
	}
	if err := s.linearize(c); errors.Is(err, errForwardRead) {
		return noLeader("the leader changed to one that serves no read index to this node; ask again")
	} else if err != nil {
		return err
	}
	return nil
}

// readHere says whether this node answers the linearizable read itself, rather than
// forwarding it: it does not lead, and the read was not forwarded to it (a forwarded request
// is answered by the leader or refused).
func (s *Server) readHere(c echo.Context) bool {
	return !s.node.IsLeader() && c.Request().Header.Get(api.HeaderForwarded) == ""
}

// lockRead runs fn as a read of the locks: at once for a stale read; otherwise linearizable,
// on the leader after a read barrier, on a follower after linearize (forwarded to the leader
// when it serves no read index).
func (s *Server) lockRead(c echo.Context, q query, fn func() error) error {
	if q.stale || !s.readHere(c) {
		return s.read(c, q, fn)
	}
	switch err := s.linearize(c); {
	case errors.Is(err, errForwardRead):
		return s.read(c, q, fn)
	case err != nil:
		return err
	}
	c.Set(readHereKey, true)
	return fn()
}

// isLockRead says whether the request is a read of the locks (GET /v1/locks, GET of a lock or
// of its check), which a follower answers itself (lockRead), under ACL too.
func isLockRead(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	if p == "/v1/locks" {
		return true
	}
	if !strings.HasPrefix(p, "/v1/locks/") {
		return false
	}
	_, action := splitAction(strings.TrimPrefix(p, "/v1/locks/"))
	return action == "" || action == "check"
}

// leaderLacks says whether the leader is known to serve no read index (see askLeader), so that
// a watch goes to it whole from the start rather than fail after its wait.
func (ri *readIndexer) leaderLacks() bool {
	id, addr := ri.s.node.Leader()
	ri.mu.Lock()
	defer ri.mu.Unlock()
	return ri.lacking == id+" "+addr && time.Now().Before(ri.lackingUntil)
}

// memberRead says whether the request is a member's request for a read index, which needs no
// token: it carries the forwarded mark, which checkForwarded has already removed unless a
// node sent it (with TLS, on a connection with a node certificate), and tells nothing but an
// index.
func memberRead(r *http.Request) bool {
	return r.URL.Path == readIndexPath && r.Header.Get(api.HeaderForwarded) != ""
}
