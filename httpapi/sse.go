package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// Server-Sent Events framing (https://html.spec.whatwg.org/multipage/server-sent-events.html),
// shared by every stream the API answers: an event is its `event:` line, an `id:` line when it
// has one, one `data:` line of JSON (JSON never holds a raw newline, so one line always does)
// and a blank line.

// sseEvent appends one event to dst: name, the id when hasID, and data, which must hold no
// newline (encoded JSON never does).
func sseEvent(dst []byte, name string, id uint64, hasID bool, data []byte) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, '\n')
	if hasID {
		dst = append(dst, "id: "...)
		dst = strconv.AppendUint(dst, id, 10)
		dst = append(dst, '\n')
	}
	dst = append(dst, "data: "...)
	dst = append(dst, data...)
	return append(dst, '\n', '\n')
}

// sseJSON is sseEvent with v encoded as its data.
func sseJSON(name string, id uint64, hasID bool, v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		// Only the API's own wire types are encoded here; none can fail.
		data = []byte(`{}`)
	}
	return sseEvent(nil, name, id, hasID, bytes.TrimSpace(data))
}

// wantsEventStream says whether the request asks for Server-Sent Events: Accept names
// text/event-stream, or the query flag stream=1 (or true).
func wantsEventStream(req *http.Request) bool {
	switch req.URL.Query().Get("stream") {
	case "1", "true":
		return true
	}
	for _, v := range req.Header.Values("Accept") {
		for _, part := range strings.Split(v, ",") {
			mt, _, _ := strings.Cut(part, ";")
			if strings.EqualFold(strings.TrimSpace(mt), "text/event-stream") {
				return true
			}
		}
	}
	return false
}

// startEventStream writes the status line and headers of a stream and flushes them, so that
// the client knows at once that the stream is open.
func startEventStream(c echo.Context) {
	h := c.Response().Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	c.Response().WriteHeader(http.StatusOK)
	c.Response().Flush()
}

// writeEvents writes frames, each one or more whole events, and flushes them.
func writeEvents(c echo.Context, frames ...[]byte) error {
	w := c.Response()
	for _, f := range frames {
		if _, err := w.Write(f); err != nil {
			return err
		}
	}
	w.Flush()
	return nil
}
