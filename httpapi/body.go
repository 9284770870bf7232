package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
)

// A request body is the one thing a client sends that the node does not read by itself: it
// is read only by readBody, for a handler that decodes it or for a follower that forwards it,
// and never before the token is judged (see Server.routes). What a body may cost is bounded
// twice: at most Config.MaxBodyBytes are read (a Content-Length over it is refused at once,
// a chunked body as soon as it passes it), within Config.BodyReadTimeout of the request's
// arrival, after which the connection's read deadline ends any read, and with it the HTTP
// server's own draining of a body nobody read. A backup to restore has its own size limit and
// a pace it must keep instead (guardBody).

// bufferedBody is a request body readBody has read in full: a handler decodes it, and a
// follower forwards the same bytes.
type bufferedBody struct {
	bytes.Reader
	data []byte
}

func (*bufferedBody) Close() error { return nil }

// hasBody says whether the request may carry a body (a Content-Length above 0, or chunked).
func hasBody(req *http.Request) bool {
	return req.Body != nil && req.Body != http.NoBody && req.ContentLength != 0
}

// guardBody bounds in time the reading of a request's body, before anything can refuse the
// request (the rate limiter, the token's check), since the HTTP server reads what is left of
// an unread body before it writes any answer: a small body gets a read deadline of
// Config.BodyReadTimeout from the request's arrival, which readBody lifts once the body has
// arrived, so that a waiting acquire may then wait. A backup to restore (PUT /v1/snapshot),
// which may take long to arrive, gets a progress deadline instead (progressBody), and an
// answer that is not a success ends its connection at once (closeNow), whatever is left of
// the body: nothing reads a backup that was refused.
func (s *Server) guardBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if !hasBody(req) {
			return next(c)
		}
		ctl := http.NewResponseController(c.Response())
		if !unlimitedBody(c) {
			_ = ctl.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout))
			return next(c)
		}
		body := &progressBody{rc: req.Body, ctl: ctl, interval: s.cfg.BodyReadTimeout, min: minRestoreProgress}
		_ = ctl.SetReadDeadline(time.Now().Add(body.interval))
		req.Body = body
		c.Set(restoreBodyKey, body)
		res := c.Response()
		res.Before(func() {
			if res.Status >= http.StatusMultipleChoices && !body.eof.Load() {
				closeNow(c)
			}
		})
		return next(c)
	}
}

// minRestoreProgress is how many bytes of a backup to restore must arrive within each
// Config.BodyReadTimeout (about 6.5 KB/s with the default 10s): a client that sends slower, or
// stops, is cut off, so that a backup's connection costs what a small body's does.
const minRestoreProgress = 64 << 10

// progressBody is the body of a restore: each read fails once less than min bytes arrived
// within interval (the connection's read deadline moves on, by interval, each time min more
// bytes have arrived), and the deadline is lifted at the end of the body, so that the restore
// that then runs is not cut off by the HTTP server's own watch for a client that went away.
type progressBody struct {
	rc       io.ReadCloser
	ctl      *http.ResponseController
	interval time.Duration
	min      int64
	window   int64 // bytes since the deadline last moved
	// eof and slow are read by the answer's writer, which may run while a forwarder reads the
	// body; slow says that a read failed at the deadline.
	eof, slow atomic.Bool
}

// restoreBodyKey is where guardBody leaves a restore's *progressBody.
const restoreBodyKey = "raftlock.restoreBody"

// restoreTooSlow says whether the request is a restore whose body was cut off for want of pace.
func restoreTooSlow(c echo.Context) bool {
	b, ok := c.Get(restoreBodyKey).(*progressBody)
	return ok && b.slow.Load()
}

// errRestoreTooSlow refuses a restore whose body did not keep the least pace.
func (s *Server) errRestoreTooSlow() *apiError {
	return invalid("the backup did not arrive at %d bytes per %v (--body-read-timeout) at least; nothing was changed", minRestoreProgress, s.cfg.BodyReadTimeout)
}

func (b *progressBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.window += int64(n); b.window >= b.min {
		b.window = 0
		_ = b.ctl.SetReadDeadline(time.Now().Add(b.interval))
	}
	switch {
	case err == io.EOF:
		b.eof.Store(true)
		_ = b.ctl.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.slow.Store(true)
	}
	return n, err
}

func (b *progressBody) Close() error { return b.rc.Close() }

// closeNow makes the answer the last on its connection, and the connection close as soon as
// the answer is written: the read deadline passes at once, so the HTTP server's reading of
// what is left of the body ends at once too, and the server closes the connection after the
// answer rather than read on.
func closeNow(c echo.Context) {
	c.Response().Header().Set(echo.HeaderConnection, "close")
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Unix(1, 0))
}

// limitBody refuses a request whose declared Content-Length is over the limit before anything
// reads it (the body's time is bounded by guardBody); readBody refuses a chunked one as soon as
// it passes the limit.
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if !hasBody(req) {
			return next(c)
		}
		if unlimitedBody(c) {
			// A backup to restore: larger than any other body, read as it streams (to the
			// leader, or on to it by a follower) and never held whole, within its own limit
			// and at a least pace (guardBody); under ACL the token is judged before it is read.
			if req.ContentLength > s.cfg.MaxSnapshotBytes {
				s.dropBody(c)
				return newError(http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, "the backup is larger than %d bytes (--max-snapshot-bytes)", s.cfg.MaxSnapshotBytes)
			}
			req.Body = http.MaxBytesReader(c.Response(), req.Body, s.cfg.MaxSnapshotBytes)
			return next(c)
		}
		if req.ContentLength > s.cfg.MaxBodyBytes {
			s.dropBody(c)
			return s.errTooLarge()
		}
		return next(c)
	}
}

// readBody returns the request's body, read at most once and in full, or refuses it: over
// the limit (413), or not arrived within the read deadline (400). A refused body's connection
// is closed after the answer (dropBody).
func (s *Server) readBody(c echo.Context) ([]byte, error) {
	req := c.Request()
	if b, ok := req.Body.(*bufferedBody); ok {
		return b.data, nil
	}
	if !hasBody(req) {
		return nil, nil
	}
	limit := s.cfg.MaxBodyBytes
	var buf []byte
	if n := req.ContentLength; n > 0 && n <= limit {
		buf = make([]byte, 0, n+1) // +1: EOF is seen without growing the buffer
	}
	data, err := readAtMost(req.Body, buf, limit)
	if err != nil {
		s.dropBody(c)
		switch {
		case errors.Is(err, errBodyTooLarge):
			return nil, s.errTooLarge()
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, invalid("the request body did not arrive within %v", s.cfg.BodyReadTimeout)
		}
		return nil, invalid("reading the request body: %v", err)
	}
	// Arrived in full: lift the deadline before a handler waits (a blocking acquire), or the
	// HTTP server's watch for the client going away would end the wait at the deadline.
	_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Time{})
	b := &bufferedBody{data: data}
	b.Reset(data)
	req.Body = b
	return data, nil
}

var errBodyTooLarge = errors.New("request body over the limit")

// readAtMost reads r to its end into buf, failing with errBodyTooLarge once more than limit
// bytes arrived.
func readAtMost(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	if buf == nil {
		buf = make([]byte, 0, 512)
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, errBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (s *Server) errTooLarge() *apiError {
	return newError(http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, "request body is larger than %d bytes", s.cfg.MaxBodyBytes)
}

// dropBody makes the answer to a request whose body is not wanted the last on its
// connection. The HTTP server then answers at once and reads what is left of the body (up to
// 256 KiB, to end the connection cleanly) only within the body's read deadline, so that a
// client still sending gets the answer rather than a reset connection.
func (s *Server) dropBody(c echo.Context) {
	c.Response().Header().Set(echo.HeaderConnection, "close")
}
