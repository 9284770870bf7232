// Package testkit holds what the tests of every package share: waiting for a condition with a
// deadline, and the goroutine-leak check each package's TestMain runs after its tests. It
// imports nothing of the project, so that the leaf packages' tests may use it too.
package testkit

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// pollInterval is how often Eventually asks again: a poll interval, not a synchronisation.
const pollInterval = 10 * time.Millisecond

// Eventually polls cond until it holds, failing the test if it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// Tests is what Main runs: a package's *testing.M.
type Tests interface{ Run() int }

// Main runs the package's tests, then each of after (closing what the tests shared), then,
// if the tests passed, fails the run when a goroutine they started is still running. TestMain
// passes its result to os.Exit.
func Main(m Tests, after ...func()) int {
	code := m.Run()
	for _, f := range after {
		f()
	}
	if code != 0 {
		return code
	}
	// Connections kept alive by the default client are the pool's, not a test's leak.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if err := goleak.Find(); err != nil {
		fmt.Fprintf(os.Stderr, "goroutines left running after the tests: %v\n", err)
		return 1
	}
	return 0
}

// Until polls cond until it returns nil, failing the test with its last error if it does not
// within timeout.
func Until(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}
