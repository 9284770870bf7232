package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procState reads the state letter of a process from /proc (R, S, T for stopped, ...).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndex(s, ")")+1:])[0]
}

func sleeper(t *testing.T) *Node {
	t.Helper()
	n := &Node{ID: "s1", LogPath: filepath.Join(t.TempDir(), "s1.log"), binary: "sleep", args: []string{"60"}, state: Stopped}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if n.State() != Stopped {
			n.Resume()
			n.Kill(ctx)
		}
	})
	return n
}

func TestNodeProcessControl(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := sleeper(t)
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); !errors.Is(err, ErrRunning) {
		t.Fatalf("second start: %v", err)
	}
	pid := n.PID()
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := poll(ctx, func() error {
		if procState(t, pid) != "T" {
			return errors.New("not stopped yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("SIGSTOP: %v (state %q)", err, procState(t, pid))
	}
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
	if n.State() != Running {
		t.Fatalf("state after resume: %s", n.State())
	}
	if err := n.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if n.State() != Stopped || procState(t, pid) != "" {
		t.Fatalf("after kill: state %s, proc %q", n.State(), procState(t, pid))
	}
	if err := n.Kill(ctx); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("kill of a stopped node: %v", err)
	}

	// Restart, pause, then a graceful stop must resume and terminate it.
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	n.Pause()
	if err := n.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if n.State() != Stopped {
		t.Fatalf("after stop: %s", n.State())
	}
	log, _ := os.ReadFile(n.LogPath)
	if strings.Count(string(log), "=== jepsen: start") != 2 {
		t.Fatalf("log should mark both starts:\n%s", log)
	}
}

func TestReservedPortsAreDistinctAndBelowTheEphemeralRange(t *testing.T) {
	lns, err := reservePorts(10)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, ln := range lns {
		p := portOf(ln)
		if p < portLow || p >= portHigh || seen[p] {
			t.Errorf("port %d: out of range or repeated", p)
		}
		seen[p] = true
		ln.Close()
	}
}
