package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
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
// server's own draining of a body nobody read.

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

// limitBody refuses a request whose declared Content-Length is over the limit before anything
// reads it, and gives every request with a body a read deadline: a client that sends its body
// a byte at a time keeps its connection no longer than Config.BodyReadTimeout. readBody lifts
// the deadline once the body has arrived, so that a waiting acquire may then wait.
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if !hasBody(req) {
			return next(c)
		}
		if unlimitedBody(c) {
			// A backup to restore: larger than any other body, read as it streams (to the
			// leader, or on to it by a follower) and never held whole, within its own limit.
			// It may take longer than a small body to arrive, so no read deadline; under ACL
			// the token is judged before it is read.
			if req.ContentLength > s.cfg.MaxSnapshotBytes {
				s.dropBody(c)
				return newError(http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, "the backup is larger than %d bytes (--max-snapshot-bytes)", s.cfg.MaxSnapshotBytes)
			}
			req.Body = http.MaxBytesReader(c.Response(), req.Body, s.cfg.MaxSnapshotBytes)
			return next(c)
		}
		_ = http.NewResponseController(c.Response()).SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout))
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
