package testkit

import (
	"os"
	"testing"
)

// runFunc is a Tests made of a function.
type runFunc func() int

func (f runFunc) Run() int { return f() }

// TestMainFailsOnALeakedGoroutine: tests that pass but leave a goroutine blocked fail the
// run; once it ends, the same check passes, and a failed run keeps its own code.
func TestMainFailsOnALeakedGoroutine(t *testing.T) {
	stop := make(chan struct{})
	leaky := runFunc(func() int {
		go func() { <-stop }()
		return 0
	})
	if code := Main(leaky); code != 1 {
		t.Errorf("Main of tests that leaked a goroutine = %d, want 1", code)
	}
	closed := false
	if code := Main(runFunc(func() int { return 0 }), func() { close(stop); closed = true }); code != 0 || !closed {
		t.Errorf("Main after the goroutine ended = %d (after ran: %v), want 0", code, closed)
	}
	if code := Main(runFunc(func() int { return 3 })); code != 3 {
		t.Errorf("Main of failed tests = %d, want their code 3", code)
	}
}

// TestMain runs this package's tests without the check, which its own test exercises.
func TestMain(m *testing.M) { os.Exit(m.Run()) }
