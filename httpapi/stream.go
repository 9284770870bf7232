package httpapi

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
)

// Streamed watches: one request, every change of the locks under its prefixes as this node
// applies it, as Server-Sent Events (docs/api.md, "Streamed watches"). Every node serves its
// own streams from its own change log, followers included; the leader is asked only for a
// stream's linearizable starting point (streamstart.go). The fan-out to the streams is the
// hub's (streamhub.go).

const (
	// defaultStreamProgress is how often a stream gets a progress event.
	defaultStreamProgress = 5 * time.Second
	// defaultStreamBuffer is how many events a stream may have waiting to be written before
	// it is dropped with a reset ("behind").
	defaultStreamBuffer = 1024
	// streamWriteTimeout bounds one write to a stream's client: one that reads nothing for
	// that long is cut off.
	streamWriteTimeout = 30 * time.Second
)

// streamReset is api.StreamReset with each lock as lockViewBody answers it; Locks is never nil
// on a reset that carries the state.
type streamReset struct {
	Index  uint64 `json:"index"`
	Reason string `json:"reason"`
	Locks  []any  `json:"locks"`
}

// streamEnding is a reset that ends the stream: it carries no state.
type streamEnding struct {
	Index  uint64 `json:"index"`
	Reason string `json:"reason"`
}

// streamChange is api.StreamChange with each lock as lockViewBody answers it.
type streamChange struct {
	Index uint64 `json:"index"`
	Locks []any  `json:"locks"`
}

// streamedWatch says whether the request asks for a streamed watch.
func streamedWatch(req *http.Request) bool {
	return req.Method == http.MethodPost && req.URL.Path == "/v1/watch" ||
		req.Method == http.MethodGet && req.URL.Path == "/v1/locks" && wantsEventStream(req)
}

// watchStreamGet answers GET /v1/locks?prefix=P with Accept: text/event-stream or stream=1.
func (s *Server) watchStreamGet(c echo.Context) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	prefixes := c.QueryParams()["prefix"]
	if len(prefixes) == 0 {
		prefixes = []string{""}
	}
	set, err := s.prefixSet(prefixes)
	if err != nil {
		return err
	}
	index, err := lastEventID(c, q.index)
	if err != nil {
		return err
	}
	return s.serveStream(c, q.stale, set, index)
}

// watchStreamPost answers POST /v1/watch: a stream of the prefixes of its body (an
// api.WatchRequest) and its query's prefix parameters.
func (s *Server) watchStreamPost(c echo.Context) error {
	q, err := s.cfg.Limits.readQuery(c)
	if err != nil {
		return err
	}
	var req api.WatchRequest
	if err := s.decodeBody(c, &req, true); err != nil {
		return err
	}
	prefixes := append(slices.Clone(req.Prefixes), c.QueryParams()["prefix"]...)
	if len(prefixes) == 0 {
		return invalid("a watch needs at least one prefix: \"prefixes\" in the body, or ?prefix=")
	}
	set, err := s.prefixSet(prefixes)
	if err != nil {
		return err
	}
	index, err := lastEventID(c, req.Index)
	if err != nil {
		return err
	}
	return s.serveStream(c, q.stale, set, index)
}

// lastEventID returns the index a stream begins after: the Last-Event-ID header's when the
// request has one (a reconnecting EventSource sends it with the URL it first used), else index.
func lastEventID(c echo.Context, index uint64) (uint64, error) {
	v := c.Request().Header.Get(api.HeaderLastEventID)
	if v == "" {
		return index, nil
	}
	i, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, invalid("Last-Event-ID %q is not an event id of this stream (a non-negative integer)", clip(v, 64))
	}
	return i, nil
}

// prefixSet is the distinct prefixes of one stream, matched against a lock name by looking up
// each of their lengths, so that a stream of a thousand prefixes costs a few lookups a change.
type prefixSet struct {
	list []string        // distinct, sorted
	m    map[string]bool // nil for a single prefix
	lens []int           // distinct lengths, nil for a single prefix
}

func (s *Server) prefixSet(prefixes []string) (*prefixSet, error) {
	seen := make(map[string]bool, len(prefixes))
	var list []string
	for _, p := range prefixes {
		if len(p) > s.cfg.Limits.MaxNameBytes {
			return nil, invalid("prefix %q… is %d bytes; the limit is %d", clip(p, 32), len(p), s.cfg.Limits.MaxNameBytes)
		}
		if !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
			return nil, invalid("prefix %q is not valid UTF-8 text", clip(p, 64))
		}
		if !seen[p] {
			seen[p] = true
			list = append(list, p)
		}
	}
	if len(list) > api.MaxWatchPrefixes {
		return nil, invalid("a watch has %d distinct prefixes; the limit is %d (open another stream)", len(list), api.MaxWatchPrefixes)
	}
	sort.Strings(list)
	set := &prefixSet{list: list}
	if len(list) > 1 {
		set.m = seen
		lens := map[int]bool{}
		for _, p := range list {
			if !lens[len(p)] {
				lens[len(p)] = true
				set.lens = append(set.lens, len(p))
			}
		}
	}
	return set, nil
}

// match says whether name falls under one of the prefixes.
func (ps *prefixSet) match(name string) bool {
	if ps.m == nil {
		return strings.HasPrefix(name, ps.list[0])
	}
	for _, n := range ps.lens {
		if n <= len(name) && ps.m[name[:n]] {
			return true
		}
	}
	return false
}

// serveStream opens a stream of the locks under set after index: it checks the caller and the
// node's leader, confirms the starting point unless stale, writes the events up to where the
// hub is, then hands the stream to the hub and writes what the hub queues for it until the
// stream ends or its client leaves.
func (s *Server) serveStream(c echo.Context, stale bool, set *prefixSet, index uint64) error {
	if s.cfg.ACL && requestSecret(c.Request()) == "" {
		return unauthorized("this request needs a token: send it as X-Raftlock-Token or Authorization: Bearer")
	}
	if e := s.leaderHeard(); e != nil {
		return e
	}
	// A token this node does not know is judged only from state confirmed current (as
	// authenticate does for every request): a node that restarted, or lags, may not have
	// applied its creation yet. So a stale stream of an unknown token waits for the
	// linearizable starting point too.
	if !stale || s.cfg.ACL && accessorOf(c) == "" {
		if err := s.streamStartPoint(c); err != nil {
			return err
		}
	}
	// Judged here, by this node (streams are not forwarded): after the starting point, its
	// state holds every token change acknowledged before the stream began.
	caller, err := s.caller(c)
	if err != nil {
		return err
	}
	startEventStream(c)
	w := newStreamWriter(c)
	sub := &subscriber{set: set, secret: requestSecret(c.Request()), wake: make(chan struct{}, 1)}
	after := index
	for {
		if s.hub.register(sub, after) {
			break
		}
		var frames [][]byte
		after, frames = s.catchUp(caller, set, after)
		if err := w.write(frames...); err != nil {
			return nil
		}
	}
	defer s.hub.remove(sub)
	ctx := c.Request().Context()
	var batch [][]byte
	for {
		select {
		case <-sub.wake:
		case <-ctx.Done():
			return nil
		case <-s.closing.Done():
			_ = w.write(endFrame(noLeader("the node is shutting down: resume through another node from the last event id")))
			return nil
		}
		var end []byte
		batch, end = sub.take(batch[:0])
		if err := w.write(batch...); err != nil {
			return nil
		}
		clear(batch)
		if end != nil {
			_ = w.write(end)
			return nil
		}
	}
}

// catchUp reads, from this node's change log, the events of the stream after index after, up
// to where the log is; it returns the index it reached and the events. An index the log no
// longer remembers (or 0) is answered with the state, a reset.
func (s *Server) catchUp(caller *identity, set *prefixSet, after uint64) (uint64, [][]byte) {
	prefix := ""
	if len(set.list) == 1 {
		prefix = set.list[0]
	}
	ch := s.node.Changes(prefix, after, maxWatchChanges)
	if ch.Reset {
		reason := api.ResetTooOld
		if after == 0 {
			reason = api.ResetStart
		}
		return ch.Next, [][]byte{s.stateFrame(caller, set, ch.Next, reason)}
	}
	var frames [][]byte
	for i := 0; i < len(ch.Locks); {
		j := i
		for j < len(ch.Locks) && ch.Locks[j].ModifyIndex == ch.Locks[i].ModifyIndex {
			j++
		}
		if f := s.changeFrame(caller, set, ch.Locks[i].ModifyIndex, ch.Locks[i:j], nil); f != nil {
			frames = append(frames, f)
		}
		i = j
	}
	return ch.Next, frames
}

// stateFrame is a reset with the whole state of the stream's prefixes, read now (so at least
// as new as index), as the lock list shows it.
func (s *Server) stateFrame(caller *identity, set *prefixSet, index uint64, reason string) []byte {
	out := streamReset{Index: index, Reason: reason, Locks: []any{}}
	seen := map[string]bool{}
	for _, p := range set.list {
		if len(set.list) > 1 && s.coveredElsewhere(set, p) {
			continue
		}
		for _, v := range s.node.FSM().LockViews(p) {
			if (v.Held || v.Waiters > 0) && !seen[v.Name] && caller.mayRead(v.Name) {
				seen[v.Name] = true
				out.Locks = append(out.Locks, s.lockViewBody(caller, v))
			}
		}
	}
	return sseJSON(api.EventReset, index, true, out)
}

// coveredElsewhere says whether a shorter prefix of the set covers p, so p adds no lock.
func (s *Server) coveredElsewhere(set *prefixSet, p string) bool {
	for _, n := range set.lens {
		if n < len(p) && set.m[p[:n]] {
			return true
		}
	}
	return false
}

// changeFrame is the change event of one command's changes (all at index), those under the
// set (every one when set is nil) that the caller may read; pick, when not nil, chooses which
// of locks to consider. It is nil when none is left.
func (s *Server) changeFrame(caller *identity, set *prefixSet, index uint64, locks []fsm.LockView, pick []int) []byte {
	out := streamChange{Index: index}
	add := func(v fsm.LockView) {
		if (set == nil || set.match(v.Name)) && caller.mayRead(v.Name) {
			out.Locks = append(out.Locks, s.lockViewBody(caller, v))
		}
	}
	if pick == nil {
		for _, v := range locks {
			add(v)
		}
	} else {
		for _, k := range pick {
			add(locks[k])
		}
	}
	if len(out.Locks) == 0 {
		return nil
	}
	return sseJSON(api.EventChange, index, true, out)
}

// endFrame is the end event carrying err's body.
func endFrame(err *apiError) []byte { return sseJSON(api.EventEnd, 0, false, err.body) }

// leaderHeard refuses a stream, 503 no_leader, on a node that has heard nothing from a leader
// for longer than an election timeout: its state may miss committed changes.
func (s *Server) leaderHeard() *apiError {
	if time.Since(s.node.LeaderContact()) > s.node.ElectionTimeout() {
		return noLeader("this node has heard from no leader for longer than an election timeout; its changes may be behind: ask another node")
	}
	return nil
}

// streamWriter writes a stream's events, each write bounded in time.
type streamWriter struct {
	c  echo.Context
	rc *http.ResponseController
}

func newStreamWriter(c echo.Context) *streamWriter {
	return &streamWriter{c: c, rc: http.NewResponseController(c.Response().Writer)}
}

func (w *streamWriter) write(frames ...[]byte) error {
	if len(frames) == 0 {
		return nil
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) // not every writer has one
	return writeEvents(w.c, frames...)
}

// streamContext is a context for work on behalf of the streams starting now: not tied to one
// request, ended when the server shuts down or after the command timeout.
func (s *Server) streamContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.closing, s.cfg.CommandTimeout)
}
