package python

import (
	"os"
	"testing"

	"github.com/raftlock/raftlock/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }
