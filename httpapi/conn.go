package httpapi

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/raftlock/raftlock/api"
)

// The HTTP server answers a few requests itself, before any handler sees them, in plain text:
// headers over Config.MaxHeaderBytes (431), a malformed request (400), a transfer coding it
// does not know (501). Every error of the API has the one JSON body of docs/api.md, so the
// connections it serves rewrite those answers (jsonErrorListener): the limits stay the
// server's own, and so does the memory they bound.

// jsonErrorListener hands the HTTP server connections whose plain-text error answers of
// net/http become the API's JSON error body.
type jsonErrorListener struct {
	net.Listener
	s *Server
}

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if t, ok := c.(connTLS); ok {
		// The TLS handshake is done (tlsutil's listener): the connection keeps its state for
		// the handlers (requestTLS), though net/http no longer sees a *tls.Conn.
		return &jsonErrorTLSConn{jsonErrorConn{c, l.s}, t}, nil
	}
	return &jsonErrorConn{c, l.s}, nil
}

// jsonErrorConn is a connection whose net/http error answers are rewritten (jsonAnswer).
type jsonErrorConn struct {
	net.Conn
	s *Server
}

func (c *jsonErrorConn) Write(p []byte) (int, error) {
	if alt, ok := jsonAnswer(p, c.s.answerHeaders()); ok {
		if bytes.HasPrefix(p, []byte("HTTP/1.1 431 ")) {
			c.s.metrics.refuse(limitHeader)
		}
		if _, err := c.Conn.Write(alt); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection when it can (net/http does so before it closes a
// connection whose request it refused, so that the client reads the answer).
func (c *jsonErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// jsonErrorTLSConn is a jsonErrorConn over TLS.
type jsonErrorTLSConn struct {
	jsonErrorConn
	tls connTLS
}

func (c *jsonErrorTLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// plainErrorHeaders are the headers of every error answer net/http writes by itself, and of
// nothing else: the server's own answers carry a Date, and handlers' the API's JSON.
const plainErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// jsonAnswer returns, for one of net/http's own plain-text error answers (written in one
// piece: "HTTP/1.1 <code> <reason>" plainErrorHeaders <text>), the same answer with the API's
// JSON error body and the extra header lines hdr.
func jsonAnswer(p []byte, hdr string) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !ok || len(rest) < 3 {
		return nil, false
	}
	status, err := strconv.Atoi(string(rest[:3]))
	if err != nil || status < 400 {
		return nil, false
	}
	_, text, ok := bytes.Cut(rest, []byte(plainErrorHeaders))
	if !ok {
		return nil, false
	}
	var body api.ErrorBody
	body.Error.Code = api.CodeInvalidArgument
	body.Error.Message = string(text)
	if status == http.StatusRequestHeaderFieldsTooLarge {
		body.Error.Code = api.CodeHeaderTooLarge
		body.Error.Message = "the request's line and headers are larger than the node accepts (--max-header-bytes); the connection is closed"
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, false
	}
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n%s\r\n%s",
		status, http.StatusText(status), len(data), hdr, data), true
}

// answerHeaders are the header lines X-Raftlock-Index and X-Raftlock-Leader, as the headers
// middleware sets them, for an answer written outside the handlers.
func (s *Server) answerHeaders() string {
	h := api.HeaderIndex + ": " + strconv.FormatUint(s.node.AppliedIndex(), 10) + "\r\n"
	if id, _ := s.node.Leader(); id != "" && validHeaderValue(id) {
		h += api.HeaderLeader + ": " + id + "\r\n"
	}
	return h
}

// validHeaderValue says whether v can go in a header line as it is.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] == 0x7f {
			return false
		}
	}
	return true
}
