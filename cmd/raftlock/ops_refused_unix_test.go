//go:build unix

package main

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// Two stops that a restart cannot cure exit with agent.ExitRefused (4), which the shipped
// units do not restart, and say why: an agent started with its usual --initial-cluster
// command on a wiped data dir (before, it bootstrapped and served as a voter that forgot its
// votes), and an agent of "the previous build" (every feature disabled) started after a
// SIGKILL on data where the cluster enabled features (before, it panicked on the first log
// entry it did not know, exit 2, in a loop under a supervisor).
func TestAgentsThatARestartCannotCureExitRefused(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	c := newProcCluster(t, ids...)
	for _, id := range ids {
		c.start(id, "--initial-cluster", c.initial(ids...))
	}
	c.waitCluster("n1", ids...)
	cl := c.client("n1")
	testkit.Eventually(t, 30*time.Second, "every feature enabled", func() bool {
		return len(clusterFeatures(t, cl)) == len(fsm.AllFeatures())
	})

	expectRefused := func(id, why string) {
		t.Helper()
		if code := c.exited(id, 30*time.Second); code != agent.ExitRefused {
			t.Fatalf("%s: exit status %d, want %d (refused)\n%s", id, code, agent.ExitRefused, c.nodes[id].log)
		}
		if !strings.Contains(c.nodes[id].log.String(), why) {
			t.Fatalf("%s's log does not say %q:\n%s", id, why, c.nodes[id].log)
		}
	}

	// A lost disk.
	c.kill("n3")
	if err := os.RemoveAll(c.nodes["n3"].dir); err != nil {
		t.Fatal(err)
	}
	c.start("n3", "--initial-cluster", c.initial(ids...))
	expectRefused("n3", "this member has already been bootstrapped")

	// A downgrade after a crash: n2 is killed (no shutdown snapshot) and started as an older
	// version that supports none of the features the cluster enabled.
	c.kill("n2")
	var all []string
	for _, f := range fsm.AllFeatures() {
		all = append(all, string(f))
	}
	c.start("n2", "--initial-cluster", c.initial(ids...), "--disable-features", strings.Join(all, ","))
	expectRefused("n2", "needs a newer raftlock")
	if log := c.nodes["n2"].log.String(); strings.Contains(log, "panic") || slices.Contains(strings.Fields(log), "goroutine") {
		t.Fatalf("n2 panicked:\n%s", log)
	}
}
