//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A three-node cluster of agent processes loses two nodes for good (killed, data gone). The
// third cannot serve alone; `raftlock recover` refuses while it runs, and once it is stopped
// rewrites its membership to itself. Started again with its old command line, it serves the
// same locks, issues tokens past everything before, and grows back to three voters with two
// new nodes that --join (each a non-voter until it has caught up). A node then removed while
// it runs says so in its log and stops by itself.
func TestRecoverAfterLosingTwoOfThreeAndGrowBack(t *testing.T) {
	c := newProcCluster(t, "n1", "n2", "n3")
	initial := c.initial("n1", "n2", "n3")
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(id, "--initial-cluster", initial)
	}
	c.waitCluster("n1", "n1", "n2", "n3")
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Sessions without a client that renews them: their locks stay put across the outage.
	var top uint64
	for i := range 4 {
		s, err := cl.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: "10m", Name: fmt.Sprintf("s%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		v := fmt.Sprintf("v%d", i)
		r, err := cl.Raw().Acquire(ctx, fmt.Sprintf("kept/%d", i), api.AcquireRequest{Session: s.ID, Value: &v})
		if err != nil {
			t.Fatal(err)
		}
		top = max(top, r.Token)
	}
	before := lockTable(t, cl)
	// Every node has applied it all before two of them go.
	testkit.Eventually(t, 30*time.Second, "every node to hold the locks", func() bool {
		for _, ep := range c.endpoints() {
			l, err := cl.GetLock(ctx, "kept/3", client.Stale(), client.AtEndpoint(ep))
			if err != nil || !l.Held {
				return false
			}
		}
		return true
	})

	for _, id := range []string{"n2", "n3"} {
		c.kill(id)
		if err := os.RemoveAll(c.nodes[id].dir); err != nil {
			t.Fatal(err)
		}
	}
	members := "n1=" + c.nodes["n1"].raftAddr
	// A running node's data: recover waits (--wait-lock) for it to exit, then says who holds it.
	if r := c.cli(nil, "recover", "--data-dir", c.nodes["n1"].dir, "--members", members, "--wait-lock", "1s"); r.code != 1 ||
		!strings.Contains(r.stderr, "in use") || !strings.Contains(r.stderr, "waited 1s") {
		t.Fatalf("recover of a running node's data: exit %d, %s", r.code, r.stderr)
	}
	// Right after a SIGTERM, while n1 is still stopping (held stopped here, SIGSTOP, so that
	// it is still there when recover starts): recover waits for it to exit instead of refusing
	// "data dir is in use" at once. (A gap that would wrap the index past the top of uint64 is
	// then refused, changing nothing.)
	c.nodes["n1"].mu.Lock()
	proc := c.nodes["n1"].cmd.Process
	c.nodes["n1"].mu.Unlock()
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rec := exec.Command(cliEnv.bin, "recover", "--data-dir", c.nodes["n1"].dir, "--members", members, "--index-gap", "18446744073709551606")
	var recOut, recErr syncBuffer
	rec.Stdout, rec.Stderr = &recOut, &recErr
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	recDone := make(chan struct{})
	go func() { _ = rec.Wait(); close(recDone) }()
	testkit.Eventually(t, 30*time.Second, "recover to wait for the stopping agent", func() bool {
		if closed(recDone) {
			_ = proc.Signal(syscall.SIGCONT)
			t.Fatalf("recover right after a SIGTERM did not wait: exit %d, %s", rec.ProcessState.ExitCode(), &recErr)
		}
		return strings.Contains(recErr.String(), "waiting up to")
	})
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-recDone:
	case <-time.After(60 * time.Second):
		_ = rec.Process.Kill()
		t.Fatalf("recover did not end once the agent exited: %s", &recErr)
	}
	if code := rec.ProcessState.ExitCode(); code != 1 || !strings.Contains(recErr.String(), "2^62") {
		t.Fatalf("recover with a gap near the top of uint64, right after a SIGTERM: exit %d, %s", code, &recErr)
	}
	if code := c.exited("n1", 30*time.Second); code < 0 {
		t.Fatal("n1 still runs after recover found its data dir free")
	}
	out := c.mustCLI(nil, "recover", "--data-dir", c.nodes["n1"].dir, "--members", members)
	if !strings.Contains(out, "recovered") {
		t.Fatalf("recover said %q", out)
	}
	c.start("n1", "--initial-cluster", initial) // the same command as before
	c.waitCluster("n1", "n1")
	one := c.client("n1")
	sameLocks(t, lockTable(t, one), before)
	s, err := one.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := client.NewMutex(s, "after/recover")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if m.Token() <= top {
		t.Fatalf("token after the recovery %d, not above %d", m.Token(), top)
	}

	for _, id := range []string{"n4", "n5"} {
		c.grow(id)
		c.start(id, "--join", c.endpoints("n1")[0])
	}
	got := c.waitCluster("n1", "n1", "n4", "n5")
	if len(got.Members) != 3 {
		t.Fatalf("members %+v", got.Members)
	}
	all := c.client("n1", "n4", "n5")
	sameLocks(t, lockTable(t, all), append(before, api.Lock{Name: "after/recover", Held: true, Session: s.ID(), Token: m.Token()}))
	for _, id := range []string{"n4", "n5"} {
		// The leader's configuration names the voter before the node has logged its promotion.
		testkit.Eventually(t, 10*time.Second, id+"'s log to say it was promoted", func() bool {
			return strings.Contains(c.nodes[id].log.String(), "promoted to a voter")
		})
	}

	// n5 removed while it runs: it notices, says so, and stops (exit 0) by itself.
	out = c.mustCLI([]string{"n1", "n4"}, "members", "remove", "n5")
	if !strings.Contains(out, "n4") || strings.Contains(out, "n5 ") {
		t.Fatalf("members remove said:\n%s", out)
	}
	if code := c.exited("n5", 30*time.Second); code != 0 {
		t.Fatalf("the removed node: exit %d (-1: still running)", code)
	}
	if log := c.nodes["n5"].log.String(); !strings.Contains(log, "this node was removed from the cluster") {
		t.Fatalf("the removed node's log does not say so:\n%s", log)
	}
	c.checkLogs()
}

// sameLocks fails the test unless got lists the same locks as want: name, holder, token, value.
func sameLocks(t *testing.T, got, want []api.Lock) {
	t.Helper()
	line := func(l api.Lock) string {
		return fmt.Sprintf("%s held=%t session=%s token=%d value=%q", l.Name, l.Held, l.Session, l.Token, l.Value)
	}
	var g, w []string
	for _, l := range got {
		g = append(g, line(l))
	}
	for _, l := range want {
		w = append(w, line(l))
	}
	slices.Sort(g)
	slices.Sort(w)
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("locks:\n%s\nwant:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}
