//go:build unix

package main

import (
	"os"
	"slices"
	"strings"
	"sync"
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

// A node of an older version (here: every feature disabled) that asks to join a cluster that
// enabled features is refused; it says so at once and exits refused with the reason, and the
// leader logs the refusal as it makes it. (Before, the joiner retried silently until it gave
// up, and the leader said nothing.)
func TestAnOlderNodeJoiningIsRefusedAtOnceOnBothSides(t *testing.T) {
	c := newProcCluster(t, "n1", "old")
	c.start("n1", "--initial-cluster", c.initial("n1"))
	c.waitCluster("n1", "n1")
	cl := c.client("n1")
	testkit.Eventually(t, 30*time.Second, "every feature enabled", func() bool {
		return len(clusterFeatures(t, cl)) == len(fsm.AllFeatures())
	})
	var all []string
	for _, f := range fsm.AllFeatures() {
		all = append(all, string(f))
	}
	c.start("old", "--join", c.endpoints("n1")[0], "--disable-features", strings.Join(all, ","))
	if code := c.exited("old", 30*time.Second); code != agent.ExitRefused {
		t.Fatalf("the older node: exit status %d, want %d (refused)\n%s", code, agent.ExitRefused, c.nodes["old"].log)
	}
	for _, want := range []string{"the cluster refused this node's request to join", "lacks"} {
		if !strings.Contains(c.nodes["old"].log.String(), want) {
			t.Fatalf("the older node's log does not say %q:\n%s", want, c.nodes["old"].log)
		}
	}
	if !strings.Contains(c.nodes["n1"].log.String(), "refused a node that asked to join") {
		t.Fatalf("the leader's log does not tell the refusal:\n%s", c.nodes["n1"].log)
	}
	if ms := c.waitCluster("n1", "n1").Members; len(ms) != 1 {
		t.Fatalf("members after the refusal: %+v", ms)
	}
}

// Stopping every node of a cluster at once (SIGTERM to all) is an orderly shutdown: no node
// logs an ERROR. What raft says then of peers that stop too, or of the term a member moved to
// as the leader handed over, is logged at WARN. (Before, each node logged raft's errors about
// its peers and its own closed transport at ERROR.)
func TestStoppingEveryNodeAtOnceLogsNoError(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	c := newProcCluster(t, ids...)
	for _, id := range ids {
		c.start(id, "--initial-cluster", c.initial(ids...))
	}
	c.waitCluster("n1", ids...)
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() { c.stop(id) })
	}
	wg.Wait()
	for _, id := range ids {
		if code := c.exited(id, time.Second); code != 0 {
			t.Errorf("%s: exit status %d", id, code)
		}
		if log := c.nodes[id].log.String(); strings.Contains(log, "[ERROR]") {
			t.Errorf("%s logged an ERROR while every node stopped:\n%s", id, log)
		}
	}
}
