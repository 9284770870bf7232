// Package devtest shares one in-process development cluster among the tests of a package.
package devtest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
)

// startTimeout bounds starting (and settling) the shared cluster.
const startTimeout = 30 * time.Second

// Shared is one three-node cluster for the tests of a package that do not hurt it: started on
// first use, closed by the package's TestMain after the last test.
type Shared struct {
	// Options returns the cluster's options; nil means the defaults.
	Options func() agent.DevOptions
	// Settle, if set, runs once after the start; an error fails every test that asks.
	Settle func(*agent.Dev) error

	once sync.Once
	dev  *agent.Dev
	err  error
}

// Get returns the shared cluster, starting it on first use.
func (s *Shared) Get(t testing.TB) *agent.Dev {
	t.Helper()
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		var opts agent.DevOptions
		if s.Options != nil {
			opts = s.Options()
		}
		s.dev, s.err = agent.StartDev(ctx, opts)
		if s.err == nil && s.Settle != nil {
			s.err = s.Settle(s.dev)
		}
	})
	if s.err != nil {
		t.Fatalf("starting the shared cluster: %v", s.err)
	}
	return s.dev
}

// Close stops the shared cluster if it was started; for packages that share more than one.
func (s *Shared) Close() {
	if s.dev != nil {
		s.dev.Close()
	}
}
