package version

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A build with -ldflags -X sets the version everything reports, and the binary knows the Go
// version it was built with.
func TestLdflagsSetTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "raftlock")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X github.com/raftlock/raftlock/internal/version.Version=9.8.7-test", "github.com/raftlock/raftlock/cmd/raftlock")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("raftlock version: %v\n%s", err, out)
	}
	if s := string(out); !strings.Contains(s, "9.8.7-test") || !strings.Contains(s, runtime.Version()) {
		t.Fatalf("raftlock version printed %q", s)
	}
}

func TestGetReportsTheVersionVariable(t *testing.T) {
	if got := Get(); got.Version != Version || got.GoVersion != runtime.Version() {
		t.Fatalf("Get() = %+v", got)
	}
}
