package client_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/raftlock/raftlock/client"
)

func TestFenceRejectsLowerToken(t *testing.T) {
	f := client.NewFence()
	if err := f.Check("a", 10); err != nil {
		t.Fatalf("first token: %v", err)
	}
	if err := f.Check("a", 10); err != nil {
		t.Fatalf("same token again: %v", err)
	}
	err := f.Check("a", 9)
	if !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("lower token: err = %v, want ErrStaleToken", err)
	}
	var se *client.StaleTokenError
	if !errors.As(err, &se) || se.Highest != 10 || se.Token != 9 || se.Lock != "a" {
		t.Fatalf("err = %#v", err)
	}
	if err := f.Check("b", 1); err != nil {
		t.Fatalf("another lock is independent: %v", err)
	}
	if err := f.Check("a", 11); err != nil || f.Highest("a") != 11 {
		t.Fatalf("higher token: %v, highest %d", err, f.Highest("a"))
	}
	if err := f.Check("a", 0); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("token 0: err = %v", err)
	}
}

func TestFenceDoRunsNothingForStaleToken(t *testing.T) {
	f := client.NewFence()
	ran := false
	_ = f.Do("a", 5, func() error { return nil })
	err := f.Do("a", 4, func() error { ran = true; return nil })
	if !errors.Is(err, client.ErrStaleToken) || ran {
		t.Fatalf("err = %v, ran = %t", err, ran)
	}
}

func TestFenceConcurrentHighestWins(t *testing.T) {
	f := client.NewFence()
	var wg sync.WaitGroup
	for i := 1; i <= 100; i++ {
		wg.Add(1)
		go func(tok uint64) {
			defer wg.Done()
			_ = f.Check("a", tok)
		}(uint64(i))
	}
	wg.Wait()
	if f.Highest("a") != 100 {
		t.Fatalf("highest %d, want 100", f.Highest("a"))
	}
	if err := f.Check("a", 99); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("err = %v", err)
	}
}

func TestFenceHandler(t *testing.T) {
	f := client.NewFence()
	writes := 0
	h := f.Handler("jobs/a", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writes++
	}))
	send := func(token uint64) int {
		req := httptest.NewRequest(http.MethodPost, "/write", nil)
		if token != 0 {
			client.SetToken(req.Header, token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	if code := send(7); code != http.StatusOK {
		t.Fatalf("token 7: %d", code)
	}
	if code := send(6); code != http.StatusConflict {
		t.Fatalf("stale token 6: %d, want 409", code)
	}
	if code := send(0); code != http.StatusBadRequest {
		t.Fatalf("no token: %d, want 400", code)
	}
	if writes != 1 {
		t.Fatalf("%d writes reached the resource, want 1", writes)
	}
}
