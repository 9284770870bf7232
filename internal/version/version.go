// Package version holds raftlock's version, set in one place: the Version variable, which a
// release build overrides with
//
//	go build -ldflags "-X github.com/raftlock/raftlock/internal/version.Version=1.2.3"
//
// and the commit, which the Go toolchain records in the binary when it builds from a git
// checkout. Everything that reports a version (raftlock version, GET /v1/cluster, /v1/health)
// reads it from here. It imports nothing of the project.
package version

import (
	"runtime"
	"runtime/debug"
)

// Version is the raftlock release this binary is; "-dev" marks a build between releases.
var Version = "0.2.0-dev"

// Info is what a binary knows of its own build.
type Info struct {
	Version string
	// Commit is the git revision the binary was built from, with "-dirty" if the work tree had
	// changes; "" when the build did not record one (go run, a build outside a checkout).
	Commit    string
	GoVersion string
}

// Get returns this binary's build information.
func Get() Info {
	info := Info{Version: Version, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
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
	}
	return info
}
