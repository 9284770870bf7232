package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
)

// The views' streams: GET /v1/sessions and GET /v1/cluster asked with Accept:
// text/event-stream answer Server-Sent Events instead of one JSON body. The first event is the
// view as the plain GET answers it; then the view again each time it changed (a session
// created, renewed or ended, a lock taken or freed, a member, a feature or the leader changed),
// no more often than viewMinGap, so that a busy cluster costs a watching console a few events a
// second however many commands it applies; a progress event when nothing changed for
// viewProgressEvery, so that a quiet stream still proves it is alive. A linearizable stream is
// served by the leader (forwarded there, the answer streamed back through the follower), which
// confirms its leadership before the first event, and ends with an end event when it stops
// leading; a stale one (?consistency=stale) by the node asked, from its own state. A token
// deleted or narrowed during the stream is judged again at each event: one that may no longer
// read the view ends the stream with an end event carrying the error (judged at least every
// viewTokenEvery).

const (
	// viewMinGap is the least time between two views of one stream.
	viewMinGap = 250 * time.Millisecond
	// viewProgressEvery is how long a stream stays quiet before a progress event.
	viewProgressEvery = 10 * time.Second
	// viewTokenEvery is how often, under ACL, a quiet stream judges its token again: a
	// token's deletion or a policy's change is not a change of the view, yet may end it.
	viewTokenEvery = time.Second
)

// viewFunc reads a view for the request's caller, or refuses it.
type viewFunc func(c echo.Context) (any, error)

// viewEvent is an end event's body: why the stream ended (the API's error body).
type viewEnd = api.ErrorBody

// viewProgress is a progress event's body: the node's applied index, where the view stands.
type viewProgress struct {
	Index uint64 `json:"index"`
}

// streamView answers a view's stream (see above). Each stream counts against its client's
// bound of blocking queries (watchlimit.go) where it was received.
func (s *Server) streamView(c echo.Context, q query, event string, view viewFunc) error {
	release, err := s.admitBlocking(c)
	if err != nil {
		return err
	}
	defer release()
	if q.stale {
		return s.serveView(c, q, event, view)
	}
	return s.atLeader(c, func() error { return s.serveView(c, q, event, view) })
}

func (s *Server) serveView(c echo.Context, q query, event string, view viewFunc) error {
	changed := s.node.WatchViews() // taken before the first read, so no change is missed
	if !q.stale {
		if err := s.readBarrier(c); err != nil {
			return err
		}
	}
	v, err := view(c) // a refusal is answered as JSON, before the stream starts
	if err != nil {
		return err
	}
	startEventStream(c)
	last, err := s.sendView(c, event, v, nil)
	if err != nil {
		return nil // the client left
	}
	s.metrics.blocking.Inc()
	defer s.metrics.blocking.Dec()
	ctx := c.Request().Context()
	quiet := time.NewTimer(viewProgressEvery)
	defer quiet.Stop()
	sent := time.Now()
	var judge <-chan time.Time
	if s.cfg.ACL {
		t := time.NewTicker(viewTokenEvery)
		defer t.Stop()
		judge = t.C
	}
	for {
		progress := false
		select {
		case <-changed:
		case <-judge:
		case <-quiet.C:
			progress = true
		case <-ctx.Done():
			return nil
		case <-s.closing.Done():
			return nil
		}
		if gap := viewMinGap - time.Since(sent); gap > 0 && !progress {
			select {
			case <-time.After(gap):
			case <-ctx.Done():
				return nil
			case <-s.closing.Done():
				return nil
			}
		}
		if !q.stale && !s.node.IsLeader() {
			_ = writeEvents(c, sseJSON(api.EventEnd, 0, false, viewEnd{Error: api.ErrorDetail{Code: api.CodeNoLeader,
				Message: "this node stopped leading: open the stream again to follow the new leader"}}))
			return nil
		}
		changed = s.node.WatchViews()
		v, err := view(c) // the token is judged again: deleted or narrowed, it ends the stream
		if err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				ae = fromClusterError(err)
			}
			_ = writeEvents(c, sseJSON(api.EventEnd, 0, false, ae.body))
			return nil
		}
		next, err := s.sendView(c, event, v, last)
		if err != nil {
			return nil
		}
		switch {
		case next != nil:
			last, sent = next, time.Now()
		case progress:
			if writeEvents(c, sseJSON(api.EventProgress, 0, false, viewProgress{Index: s.node.AppliedIndex()})) != nil {
				return nil
			}
		default:
			continue // nothing this caller sees changed: the quiet timer runs on
		}
		if !quiet.Stop() {
			select {
			case <-quiet.C:
			default:
			}
		}
		quiet.Reset(viewProgressEvery)
	}
}

// sendView writes v as an event unless what it shows is what last showed (the time a lease has
// left is not compared: it changes by itself, and the page counts it down); it returns what
// it sent, or nil if it sent nothing.
func (s *Server) sendView(c echo.Context, event string, v any, last []byte) ([]byte, error) {
	sig := v
	if l, ok := v.(api.SessionList); ok {
		cp := api.SessionList{Sessions: make([]api.SessionInfo, len(l.Sessions))}
		copy(cp.Sessions, l.Sessions)
		for i := range cp.Sessions {
			cp.Sessions[i].ExpiresIn = ""
		}
		sig = cp
	}
	b, err := json.Marshal(sig)
	if err != nil {
		return nil, err
	}
	if last != nil && bytes.Equal(b, last) {
		return nil, nil
	}
	if err := writeEvents(c, sseJSON(event, s.node.AppliedIndex(), true, v)); err != nil {
		return nil, err
	}
	return b, nil
}

// copyFlushing copies a streamed answer (Server-Sent Events) from the leader to the client,
// flushing after each read so that every event goes on as it arrives.
func copyFlushing(w *echo.Response, r io.Reader, buf []byte) error {
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			w.Flush()
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
