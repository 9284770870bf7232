package python

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/history"
)

// pytestInterpreters are the interpreters tried, in order, for one that has pytest: the one on
// PATH first, then Debian's (python3-pytest installs pytest for it, also where another
// python3 comes first on PATH).
var pytestInterpreters = []string{"python3", "/usr/bin/python3"}

// findPytest returns an interpreter that can import pytest, or "".
func findPytest(t *testing.T) string {
	t.Helper()
	for _, py := range pytestInterpreters {
		path, err := exec.LookPath(py)
		if err != nil {
			continue
		}
		if err := exec.Command(path, "-c", "import pytest").Run(); err == nil {
			return path
		}
	}
	return ""
}

// TestPythonClient runs the Python client's suite (clients/python/tests) with pytest against
// three agent processes of a binary built here, and a TLS + ACL cluster. Without python3 and
// pytest the test is skipped, unless RAFTLOCK_TEST_PY=1 (as in .ci/run), which makes it fail.
// Then jepsen's belief checker judges what the suite's Python workers believed while a nemesis
// cut some of them off (tests/test_belief.py), as it judges the harness's Go workers.
func TestPythonClient(t *testing.T) {
	py := findPytest(t)
	if py == "" {
		if os.Getenv("RAFTLOCK_TEST_PY") == "1" {
			t.Fatal("RAFTLOCK_TEST_PY=1 but no python3 with pytest is installed (apt-get install python3-pytest)")
		}
		t.Skip("no python3 with pytest (apt-get install python3-pytest, or set RAFTLOCK_TEST_PY=1 to require it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "raftlock")
	build := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "./cmd/raftlock")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building raftlock: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	historyFile := filepath.Join(t.TempDir(), "belief-history.json")
	cmd.Env = append(os.Environ(), "RAFTLOCK_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1", "RAFTLOCK_BELIEF_OUT="+historyFile)
	// The suite stops its agents by pid when it ends. On a timeout pytest is interrupted, as
	// Ctrl-C would, so that it still stops them (on Linux they also get SIGTERM when pytest
	// dies); it is killed if it has not ended 30 s later.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	t.Log(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pytest: %v", err)
	}
	checkBeliefs(t, historyFile)
}

// beliefTTL is the session TTL of the belief workers (tests/test_belief.py).
const beliefTTL = 2 * time.Second

// checkBeliefs runs jepsen's belief checker over the history the Python workers wrote.
func checkBeliefs(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the belief workers wrote no history: %v", err)
	}
	var ops []history.Op
	if err := json.Unmarshal(b, &ops); err != nil {
		t.Fatalf("reading the belief history: %v", err)
	}
	beliefs := 0
	for _, op := range ops {
		if op.Kind == history.Believe {
			beliefs++
		}
	}
	if beliefs == 0 {
		t.Fatalf("the history of %d ops holds no belief", len(ops))
	}
	res := checker.CheckBelief(ops, checker.DefaultConfig(beliefTTL))
	t.Log(res.Line())
	if !res.Valid {
		t.Fatalf("the Python workers' beliefs: %s", res)
	}
}
