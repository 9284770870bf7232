package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
)

// A stream's linearizable starting point. Before its first event a linearizable stream makes
// sure that the node serving it has applied every write acknowledged before the stream's
// request arrived; from there on the node's own applied log gives it every later change in
// order (docs/safety.md, "Streamed watches").
//
//   - On the ready leader: one leadership confirmation (cluster.Node.ReadBarrier), shared with
//     every read and stream that arrives in the same moment by the confirmer's rounds. A ready
//     leader has applied every write it acknowledged.
//   - On a follower: the leader's confirmed applied index, asked once for all the streams that
//     start together (startRounds), then a wait until this node has applied as far. The
//     question is an ordinary linearizable read of the API, a watch that answers at once
//     (GET /v1/locks?prefix=&index=<max>&wait=0s, marked forwarded so that only the leader
//     answers it): the leader confirms its leadership after the request arrived and answers with
//     its applied index in X-Raftlock-Index. It works against a leader of any version that has
//     prefix watches.
//
// This is the part of a general follower read index that streams need; it is kept here, small,
// until the API has one.

// startRounds shares the follower's questions to the leader: a stream joins the next round,
// which starts once the one under way (asked, perhaps, before the stream arrived) has ended, so
// a burst of N streams costs about two questions, not N. Under ACL the rounds are per token
// (the leader judges the token that asks).
type startRounds struct {
	mu      sync.Mutex
	next    map[string]*startRound
	running map[string]bool
}

type startRound struct {
	done  chan struct{}
	req   *http.Request // the first joiner's, for its token
	index uint64
	err   error
}

// streamStartPoint returns once this node has applied every write acknowledged before the
// request arrived, or with the error to answer.
func (s *Server) streamStartPoint(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.CommandTimeout)
	defer cancel()
	if s.node.IsLeader() {
		return s.readBarrier(c)
	}
	// A follower takes the read index every linearizable read on it takes; only a leader of a
	// build without read indexes is asked the old way, below.
	if err := s.linearize(c); !errors.Is(err, errForwardRead) {
		return err
	}
	index, err := s.leaderAppliedIndex(ctx, c.Request())
	if err != nil {
		return err
	}
	if err := s.node.WaitApplied(ctx, index); err != nil {
		e := noLeader("this node has not applied the log as far as the leader (%d) in time; ask again, or another node", index)
		e.internalErr = err
		return e
	}
	return nil
}

// leaderAppliedIndex joins the next round of questions to the leader and returns its answer.
func (s *Server) leaderAppliedIndex(ctx context.Context, req *http.Request) (uint64, error) {
	key := ""
	if s.cfg.ACL {
		key = requestSecret(req)
	}
	rs := &s.starts
	rs.mu.Lock()
	if rs.next == nil {
		rs.next, rs.running = map[string]*startRound{}, map[string]bool{}
	}
	r := rs.next[key]
	if r == nil {
		r = &startRound{done: make(chan struct{}), req: req}
		rs.next[key] = r
	}
	if !rs.running[key] {
		rs.running[key] = true
		delete(rs.next, key)
		go s.runStartRounds(key, r)
	}
	rs.mu.Unlock()
	select {
	case <-r.done:
		return r.index, r.err
	case <-ctx.Done():
		return 0, noLeader("the leader did not confirm the stream's starting point in time; ask again")
	}
}

// runStartRounds runs r, then the rounds that were joined meanwhile, until none is waiting.
func (s *Server) runStartRounds(key string, r *startRound) {
	rs := &s.starts
	for r != nil {
		r.index, r.err = s.askLeaderIndex(r.req)
		r.req = nil
		close(r.done)
		rs.mu.Lock()
		r = rs.next[key]
		delete(rs.next, key)
		if r == nil {
			delete(rs.running, key)
		}
		rs.mu.Unlock()
	}
}

// askLeaderIndex asks the leader for its applied index after a leadership confirmation made
// now, with the token of in.
func (s *Server) askLeaderIndex(in *http.Request) (uint64, error) {
	id, addr := s.node.Leader()
	if id == "" || addr == "" || id == s.node.ID() {
		return 0, noLeader("no leader is known right now to confirm the stream's starting point")
	}
	target := s.fwd.scheme + "://" + addr
	if strings.Contains(addr, "://") {
		target = strings.TrimSuffix(addr, "/")
	}
	ctx, cancel := s.streamContext()
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, http.MethodGet,
		target+"/v1/locks?prefix=&index="+strconv.FormatUint(^uint64(0), 10)+"&wait=0s", http.NoBody)
	if err != nil {
		return 0, fmt.Errorf("asking the leader for a stream's start: %w", err)
	}
	for _, k := range []string{api.HeaderToken, "Authorization"} {
		if v, ok := in.Header[k]; ok {
			out.Header[k] = v
		}
	}
	out.Header.Set(api.HeaderForwarded, s.node.ID())
	res, err := s.fwd.transport.RoundTrip(out)
	if err != nil {
		e := noLeader("the leader could not be asked to confirm the stream's starting point")
		e.internalErr = err
		return 0, e
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	if res.StatusCode != http.StatusOK {
		// No refusal of the question is the caller's answer: the node asked may have stopped
		// leading, or restarted with a state that lacks the caller's token (an older build
		// judges the token it is sent), and this node judges the token itself once the start
		// is confirmed. Ask again, as for any unconfirmed start.
		var eb api.ErrorBody
		_ = json.Unmarshal(body, &eb)
		return 0, noLeader("the leader did not confirm the stream's starting point (it answered %d %s); ask again", res.StatusCode, eb.Error.Code)
	}
	index, err := strconv.ParseUint(res.Header.Get(api.HeaderIndex), 10, 64)
	if err != nil {
		e := noLeader("the leader's answer had no applied index")
		e.internalErr = err
		return 0, e
	}
	return index, nil
}
