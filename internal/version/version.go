// Package version holds raftlock's version, set in one place: the Version variable, which a
// release build overrides with
//
//	go build -ldflags "-X github.com/raftlock/raftlock/internal/version.Version=1.2.3"
//
// and the commit, which the Go toolchain records in the binary when it builds from a git
// checkout, or which the build sets with -X on the Commit variable. Everything that reports a
// version (raftlock version, GET /v1/cluster, /v1/health) reads it from here. It imports
// nothing of the project.
package version

import (
	"regexp"
	"runtime"
	"runtime/debug"
)

// Version is the raftlock release this binary is; "-dev" marks a build between releases.
var Version = "0.2.0-dev"

// Commit, when a build sets it (-ldflags "-X github.com/raftlock/raftlock/internal/version.Commit=$(git
// rev-parse HEAD)", as the Docker image's build does), is the commit the binary was built
// from. Empty, the commit is read from what the Go toolchain recorded in the binary.
var Commit = ""

// Info is what a binary knows of its own build.
type Info struct {
	Version string
	// Commit is the git revision the binary was built from, with "-dirty" if the work tree had
	// changes; "" when the build did not record one (see UnknownCommit).
	Commit    string
	GoVersion string
}

// UnknownCommit says why a build may know no commit, and how to give it one.
const UnknownCommit = "the build recorded none: go build records it (vcs.revision) only when it builds inside a " +
	"git checkout, and not with -buildvcs=false (GOFLAGS) or from a git worktree; set it with " +
	`-ldflags "-X github.com/raftlock/raftlock/internal/version.Commit=$(git rev-parse HEAD)"`

// Get returns this binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return fromBuildInfo(Commit, bi)
}

// pseudoVersion matches the commit at the end of a Go pseudo-version
// (v0.0.0-20261206230000-0123456789ab), which go install module@commit records as the main
// module's version.
var pseudoVersion = regexp.MustCompile(`-\d{14}-([0-9a-f]{12})(\+incompatible)?$`)

// fromBuildInfo is Get's work: the commit set at build time, else the VCS revision Go recorded
// (with "-dirty" when vcs.modified), else the commit of the main module's pseudo-version.
func fromBuildInfo(commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: Version, GoVersion: runtime.Version(), Commit: commit}
	if info.Commit != "" || bi == nil {
		return info
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && info.Commit != "" {
		info.Commit += "-dirty"
	}
	if info.Commit == "" {
		if m := pseudoVersion.FindStringSubmatch(bi.Main.Version); m != nil {
			info.Commit = m[1]
		}
	}
	return info
}
