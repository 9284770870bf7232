package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// A server whose certificate does not verify is refused at once, with an error that says so
// (client.TLSPermanent), not retried until the retry timeout: no retry mends a CA.
func TestUnverifiableServerFailsAtOnce(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("a request reached a server the client must not trust")
	}))
	defer srv.Close()
	c, err := client.New([]string{srv.URL, srv.URL + "/"}, client.WithRetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = c.GetLock(ctx, "x")
	if err == nil || !client.TLSPermanent(err) || strings.Contains(err.Error(), "gave up after") || ctx.Err() != nil {
		t.Fatalf("GetLock from a server with an unknown CA: %v; want a TLS refusal at once", err)
	}
}
