package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

// streamingTransport returns an in-process transport to a handler that writes "first",
// flushes, waits for next (or for its request to end), then writes "second". Its context's
// end is reported on ended.
func streamingTransport(next <-chan struct{}, ended chan<- error) *inProcess {
	e := echo.New()
	e.GET("/stream", func(c echo.Context) error {
		w := c.Response()
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("first"))
		w.Flush()
		select {
		case <-next:
			_, _ = w.Write([]byte("second"))
		case <-c.Request().Context().Done():
			ended <- c.Request().Context().Err()
		}
		return nil
	})
	return newInProcess(&Server{echo: e})
}

// An answer that flushes is handed back at its first Flush and read as the handler writes it.
func TestInProcessStreamsFromTheFirstFlush(t *testing.T) {
	next := make(chan struct{})
	rt := streamingTransport(next, make(chan error, 1))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://in-process/stream", nil)
	res, err := rt.RoundTrip(req) // returns before the handler does, or the test hangs
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d", res.StatusCode)
	}
	buf := make([]byte, len("first"))
	if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != "first" {
		t.Fatalf("read %q, %v before the handler went on", buf, err)
	}
	close(next)
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(rest) != "second" {
		t.Fatalf("then read %q, %v", rest, err)
	}
}

// Closing a streamed answer's body ends the handler's context, as a closed connection would.
func TestInProcessClosingTheBodyEndsTheHandler(t *testing.T) {
	ended := make(chan error, 1)
	rt := streamingTransport(make(chan struct{}), ended)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://in-process/stream", nil)
	res, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("handler's context ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end when the body was closed")
	}
	if err := rt.shutdown(t.Context()); err != nil {
		t.Fatalf("shutdown with no request in flight: %v", err)
	}
}
