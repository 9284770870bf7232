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

// lockPastHeldRequest locks m while h holds back its first request (the Lock wins with its
// next one), then unlocks: h keeps the first request for a late delivery.
func lockPastHeldRequest(ctx context.Context, t *testing.T, h holder, m *client.Mutex) {
	t.Helper()
	// The next chunk's request passes and is granted.
	if err := holdFirstRequest(ctx, t, h, m.Lock); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// holdFirstRequest runs call while h holds back its first acquire, lets the later requests
// pass once that one is held, and returns what call returned.
func holdFirstRequest(ctx context.Context, t *testing.T, h holder, call func(context.Context) error) error {
	t.Helper()
	h.Hold()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case <-h.Arrived():
	case <-ctx.Done():
		t.Fatal("no acquire was held")
	}
	h.Pass()
	return <-done
}
