package version

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
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

// The commit comes from the build's -X on Commit first, else from what Go recorded: the VCS
// revision (dirty when the tree had changes), else the commit of a pseudo-version (go install
// module@commit); with none of them it is empty.
func TestCommitFromTheBuild(t *testing.T) {
	vcs := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abc"}, {Key: "vcs.modified", Value: "true"}}}
	pseudo := &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261206230000-0123456789ab"}}
	devel := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	for _, tc := range []struct {
		set  string
		bi   *debug.BuildInfo
		want string
	}{
		{"feedbeef", vcs, "feedbeef"},
		{"", vcs, "0123abc-dirty"},
		{"", pseudo, "0123456789ab"},
		{"", devel, ""},
		{"", nil, ""},
	} {
		if got := fromBuildInfo(tc.set, tc.bi).Commit; got != tc.want {
			t.Errorf("commit set %q, build info %+v: %q, want %q", tc.set, tc.bi, got, tc.want)
		}
	}
}

// raftlock version names the commit a build set with -X, and, when the build recorded none
// (here -buildvcs=false), says why and how to set it instead of a bare "commit unknown".
func TestVersionCommandNamesTheCommitOrSaysWhyNot(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		ldflags string
		want    string
	}{
		{"-X github.com/raftlock/raftlock/internal/version.Commit=c0ffee1234", "commit c0ffee1234\n"},
		{"", "commit unknown (the build recorded none"},
	} {
		bin := filepath.Join(dir, "raftlock")
		build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "-ldflags", tc.ldflags, "github.com/raftlock/raftlock/cmd/raftlock")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build: %v\n%s", err, out)
		}
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("raftlock version: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Fatalf("raftlock version (ldflags %q) printed %q, want %q in it", tc.ldflags, out, tc.want)
		}
	}
}
