package archtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/raftlock/raftlock/"

// allowed lists, for every package of the module, the packages of the module it may import
// (tests aside). A package missing here fails the test too: a new package states its place.
var allowed = map[string][]string{
	"api":               nil,
	"fsm":               nil,
	"config":            nil,
	"tlsutil":           nil,
	"internal/version":  nil,
	"docs":              nil,
	"ui":                nil,
	"backup":            {"fsm"},
	"cluster":           {"api", "backup", "fsm", "tlsutil"},
	"httpapi":           {"api", "backup", "cluster", "docs", "fsm", "tlsutil", "ui"},
	"agent":             {"cluster", "config", "fsm", "httpapi", "internal/version", "tlsutil"},
	"internal/devtest":  {"agent"},
	"internal/archtest": nil,
	"internal/testkit":  nil,
	// A node inside a Go program: the node, its API, and a client bound to it in memory.
	"embed":                      {"client", "cluster", "httpapi", "internal/version", "tlsutil"},
	"examples/embedded-election": {"client", "embed"},
	// The Go client speaks HTTP only: never a server package.
	"client": {"api"},
	"bench":  {"agent", "api", "client"},
	"deploy": nil,
	"cmd/raftlock": {"agent", "api", "backup", "bench", "client", "cluster", "config", "fsm",
		"internal/version", "tlsutil"},
	// The harness drives real agent processes through their HTTP API and signals; tlsutil
	// only makes the certificates of a secure run.
	"jepsen":         {"jepsen/checker", "jepsen/cluster", "jepsen/history", "jepsen/nemesis", "jepsen/workload"},
	"jepsen/checker": {"api", "jepsen/history"},
	// Only tests: embedded nodes and their workers, judged by the harness's checker.
	"jepsen/embedded": {"client", "embed", "jepsen/checker", "jepsen/history"},
	"jepsen/cluster":  {"api", "jepsen/checker", "jepsen/faultfs", "jepsen/proxy", "tlsutil"},
	"jepsen/faultfs":  nil,
	"jepsen/history":  nil,
	"jepsen/nemesis":  {"jepsen/cluster", "jepsen/history", "jepsen/proxy", "jepsen/workload"},
	"jepsen/proxy":    nil,
	"jepsen/workload": {"api", "client", "jepsen/history", "jepsen/proxy"},
	"cmd/jepsen":      {"jepsen", "jepsen/checker", "jepsen/faultfs", "jepsen/history", "jepsen/nemesis"},
	// Only tests: the Python client's pytest suite against agent processes, and jepsen's belief
	// checker over the history its workers wrote.
	"clients/python": nil,
}

// Every package imports only what its place allows.
func TestImportsPointOneWay(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			continue // the module's root holds no package
		}
		may, known := allowed[pkg]
		if !known {
			t.Errorf("package %s is not in the import rules: add it, with what it may import, here and in its doc", pkg)
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if ours && !slices.Contains(may, dep) {
				t.Errorf("%s imports %s, which its place does not allow (allowed: %v)", pkg, dep, may)
			}
		}
	}
	if seen < 20 {
		t.Fatalf("go list named only %d packages of the module:\n%s", seen, out)
	}
}
