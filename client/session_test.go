package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/client"
)

// A holder cut off from the cluster gives the lock up locally before the cluster can grant
// it to anyone else.
func TestSessionDoneBeforeServerGrantsElsewhere(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 30*time.Second)
	name := lockName(t, "m")
	proxies, eps := proxiedEndpoints(t, dev)
	cutOff := newClient(t, eps, client.WithRetryTimeout(time.Second))
	direct := newClient(t, dev.Endpoints())

	holder := lockedMutex(ctx, t, cutOff, name, client.WithTTL(2*time.Second))
	waiter := client.NewMutex(newSession(t, direct, client.WithTTL(10*time.Second)), name)
	granted := make(chan time.Time, 1)
	errs := make(chan error, 1)
	go func() {
		if err := waiter.Lock(ctx); err != nil {
			errs <- err
			return
		}
		granted <- time.Now()
	}()
	waitWaiters(ctx, t, direct, name, 1)

	for _, p := range proxies {
		p.Cut()
	}
	// Both moments are taken when they happen; the waits below only collect them.
	var doneAt, grantAt time.Time
	select {
	case <-holder.Context().Done():
		doneAt = time.Now()
	case <-ctx.Done():
		t.Fatal("the cut-off holder never gave the lock up")
	}
	select {
	case grantAt = <-granted:
	case err := <-errs:
		t.Fatalf("waiter: %v", err)
	case <-ctx.Done():
		t.Fatal("the waiter was never granted the lock")
	}
	if !doneAt.Before(grantAt) {
		t.Fatalf("the cut-off holder gave up %s after the lock was granted elsewhere", doneAt.Sub(grantAt))
	}
	if err := holder.Session().Err(); !errors.Is(err, client.ErrSessionDeadline) {
		t.Fatalf("holder session: %v, want ErrSessionDeadline", err)
	}
	if cause := context.Cause(holder.Context()); !errors.Is(cause, client.ErrLockLost) {
		t.Fatalf("mutex context cause %v, want ErrLockLost", cause)
	}
	t.Logf("holder gave up %s before the grant", grantAt.Sub(doneAt))
}

func TestSessionDestroyedElsewhereClosesDone(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 20*time.Second)
	c := newClient(t, dev.Endpoints())
	s := newSession(t, c, client.WithTTL(3*time.Second))
	m := client.NewMutex(s, lockName(t, "m"))
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	other := newClient(t, dev.Endpoints())
	if _, err := other.Raw().DestroySession(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(2 * s.TTL()):
		t.Fatal("Done not closed after the session was destroyed")
	}
	if !errors.Is(s.Err(), client.ErrSessionNotFound) {
		t.Fatalf("Err = %v, want ErrSessionNotFound", s.Err())
	}
	<-m.Context().Done()
	if cause := context.Cause(m.Context()); !errors.Is(cause, client.ErrLockLost) || !errors.Is(cause, client.ErrSessionNotFound) {
		t.Fatalf("mutex context cause %v, want ErrLockLost and ErrSessionExpired", cause)
	}
	if err := m.Unlock(ctx); !errors.Is(err, client.ErrLockLost) {
		t.Fatalf("Unlock after the loss: %v, want ErrLockLost", err)
	}
	if err := m.Lock(ctx); !errors.Is(err, client.ErrSessionNotFound) {
		t.Fatalf("Lock on a lost session: %v", err)
	}
}

// countingTransport counts requests by "METHOD path-pattern".
type countingTransport struct {
	mu    sync.Mutex
	calls map[string]int
	next  http.RoundTripper
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	key := r.Method + " " + r.URL.Path
	if strings.HasPrefix(r.URL.Path, "/v1/sessions/") && strings.HasSuffix(r.URL.Path, "/renew") && r.URL.Path != "/v1/sessions/renew" {
		key = r.Method + " /v1/sessions/{id}/renew"
	}
	c.mu.Lock()
	c.calls[key]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *countingTransport) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[key]
}

// The sessions of one client are renewed together: many sessions cost a few batch requests
// per round, and every session stays alive well past its TTL.
func TestSessionsOfOneClientRenewInBatches(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 60*time.Second)
	ct := &countingTransport{calls: map[string]int{}, next: http.DefaultTransport}
	c := newClient(t, dev.Endpoints(), client.WithTransport(ct))
	const n, ttl = 200, 2 * time.Second
	sessions := make([]*client.Session, n)
	for i := range sessions {
		sessions[i] = newSession(t, c, client.WithTTL(ttl))
	}
	// Counted from here: while the sessions were being created, one by one, fewer were there
	// to batch, and a loaded machine makes that phase long.
	start, before := time.Now(), ct.count("POST /v1/sessions/renew")
	time.Sleep(2 * ttl) // the sessions must outlive their TTL twice over; nothing to await
	batches, elapsed := ct.count("POST /v1/sessions/renew")-before, time.Since(start)
	for i, s := range sessions {
		if err := s.Err(); err != nil {
			t.Fatalf("session %d lost after %s: %v", i, time.Since(start), err)
		}
		if _, err := c.Raw().GetSession(ctx, s.ID()); err != nil {
			t.Fatalf("session %d on the server: %v", i, err)
		}
	}
	if single := ct.count("PUT /v1/sessions/{id}/renew"); single != 0 {
		t.Fatalf("%d single renewals; the server has the batch endpoint", single)
	}
	// Each session renews about every TTL/3: unbatched, n*elapsed/(TTL/3) requests (1,200 in
	// 2 TTLs). Batched, each request must carry three renewals or more on average.
	unbatched := int(float64(n) * elapsed.Seconds() / (ttl / 3).Seconds())
	if batches == 0 || batches > unbatched/3 {
		t.Fatalf("%d batch requests for %d sessions over %s (%d renewals due): renewals were not batched",
			batches, n, elapsed, unbatched)
	}
	t.Logf("%d sessions renewed for %s with %d batch requests", n, elapsed.Round(time.Millisecond), batches)
}

// slowAnswers delays the answers to batch renewals and records when each was sent.
type slowAnswers struct {
	next  http.RoundTripper
	delay time.Duration

	mu    sync.Mutex
	sends []time.Time
}

func (s *slowAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/v1/sessions/renew" {
		return s.next.RoundTrip(r)
	}
	s.mu.Lock()
	s.sends = append(s.sends, time.Now())
	s.mu.Unlock()
	resp, err := s.next.RoundTrip(r)
	time.Sleep(s.delay) // the answer is slow on its way back
	return resp, err
}

func (s *slowAnswers) lastSend() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sends[len(s.sends)-1]
}

// The local deadline runs from when the acknowledged renewal was sent, not from when its
// answer came: an answer that took long says nothing about when the server restarted the TTL.
func TestSessionDeadlineRunsFromTheRenewalsSending(t *testing.T) {
	dev := sharedCluster(t)
	st := &slowAnswers{next: http.DefaultTransport, delay: 600 * time.Millisecond}
	c := newClient(t, dev.Endpoints(), client.WithTransport(st))
	const ttl = 3 * time.Second
	s := newSession(t, c, client.WithTTL(ttl))
	if s.SafetyMargin() != ttl/5 {
		t.Fatalf("default safety margin %s, want TTL/5", s.SafetyMargin())
	}
	first := s.Deadline()
	waitFor(t, 10*time.Second, "a renewal to be acknowledged", func() bool { return s.Deadline().After(first) })
	// The renewal whose answer moved the deadline is the last one sent: the next is due TTL/3
	// after it, longer than its answer took.
	if bound := st.lastSend().Add(ttl - s.SafetyMargin()); s.Deadline().After(bound) {
		t.Fatalf("deadline %s after the renewal was sent + TTL - margin", s.Deadline().Sub(bound))
	}
	m := newSession(t, c, client.WithTTL(ttl), client.WithSafetyMargin(time.Second))
	if m.SafetyMargin() != time.Second {
		t.Fatalf("safety margin %s, want 1s", m.SafetyMargin())
	}
	if _, err := c.NewSession(context.Background(), client.WithTTL(ttl), client.WithSafetyMargin(ttl/2)); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("a margin of TTL/2: %v, want ErrInvalidArgument", err)
	}
}
