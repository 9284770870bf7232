package docs_test

import (
	"os"
	"testing"

	"github.com/raftlock/raftlock/internal/testkit"
)

// TestMain fails the run if a test leaves a goroutine running.
func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
