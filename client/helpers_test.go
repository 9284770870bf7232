package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// waitWaiters waits until the named lock has n sessions in its queue.
func waitWaiters(ctx context.Context, t *testing.T, c *client.Client, name string, n int) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%d waiters of %s", n, name), func() bool {
		l, err := c.GetLock(ctx, name)
		return err == nil && l.Waiters == n
	})
}

// decodeStrict decodes a request body, refusing unknown fields as the server does.
func decodeStrict(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
