package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// cliEnv is what the CLI tests share: the raftlock binary, built once, and a cluster.
var cliEnv struct {
	bin string
	dev *agent.Dev
}

// TestMain builds the raftlock binary once and starts one in-process cluster for the
// tests that run it.
func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "raftlock-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cliEnv.bin = filepath.Join(dir, "raftlock")
	build := exec.Command("go", "build", "-o", cliEnv.bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building raftlock:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the cluster:", err)
		return 1
	}
	cliEnv.dev = dev
	return testkit.Main(m, func() { dev.Close() })
}

// cliResult is how a run of the binary ended.
type cliResult struct {
	code   int
	stdout string
	stderr string
}

// startCLI starts the binary with the cluster's endpoints in RAFTLOCK_ENDPOINTS; wait with
// finish. The process is killed if the test ends first.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(cliEnv.bin, args...)
	cmd.Env = append(os.Environ(), endpointsEnv+"="+strings.Join(cliEnv.dev.Endpoints(), ","))
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, &stdout, &stderr
}

// finish waits for a started run, at most timeout.
func finish(t *testing.T, cmd *exec.Cmd, stdout, stderr *syncBuffer, timeout time.Duration) cliResult {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("running raftlock: %v", err)
		}
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("raftlock %q did not finish within %s; stderr:\n%s", cmd.Args[1:], timeout, stderr)
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// runCLI runs the binary to the end.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	cmd, stdout, stderr := startCLI(t, args...)
	return finish(t, cmd, stdout, stderr, 30*time.Second)
}

// testClient returns a Go client of the test cluster.
func testClient(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.New(cliEnv.dev.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// holdLock takes name with a new session of c, held until the test ends.
func holdLock(t *testing.T, c *client.Client, name string) *client.Mutex {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	m := client.NewMutex(s, name)
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	return m
}

// lockIsFree reports whether nobody holds name.
func lockIsFree(t *testing.T, c *client.Client, name string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := c.GetLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return !l.Held
}

// testLock names a lock for one test.
func testLock(t *testing.T) string { return "cli-test/" + t.Name() }

// syncBuffer is a bytes.Buffer that a test may read while a process writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}
