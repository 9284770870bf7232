package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/jepsen/faultfs"
)

// Errors of process control.
var (
	ErrRunning    = errors.New("cluster: node is already running")
	ErrNotRunning = errors.New("cluster: node is not running")
)

// State is what a node's process is doing.
type State string

// Process states.
const (
	Stopped State = "stopped"
	Running State = "running"
	Paused  State = "paused"
)

// Node is one agent process and the addresses it serves.
type Node struct {
	// ID is the node id (n1, n2, ...).
	ID string
	// HTTPAddr is the node's HTTP API address.
	HTTPAddr string
	// RaftAddr is the node's own Raft address; peers reach it through proxies.
	RaftAddr string
	// DataDir holds the node's Raft state; it survives kills and restarts.
	DataDir string
	// LogPath is the file the process's stdout and stderr go to, across restarts.
	LogPath string
	// Disk is the fault-injecting file system DataDir is mounted from, or nil (see
	// Options.FaultFS).
	Disk *faultfs.FS

	binary string
	args   []string

	mu       sync.Mutex
	cmd      *exec.Cmd
	state    State
	exited   chan struct{} // closed when the current process has been reaped
	starts   int
	exitCode int // of the last process that exited: -1 if a signal ended it
}

// Start launches the process in its own process group. It does not wait for it to serve.
func (n *Node) Start() error { return n.start(n.args, nil) }

// Binary is the raftlock executable the node's next start runs.
func (n *Node) Binary() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.binary
}

// SetBinary makes the node's next start run the executable at path, as an operator puts
// another build in place before restarting a node; the running process is left alone.
func (n *Node) SetBinary(path string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.binary = path
}

// StartJoining launches the process as a new member of the running cluster, as an operator
// brings back a node whose data was lost: with --join endpoints instead of
// --initial-cluster, and the agent token (RAFTLOCK_AGENT_TOKEN) when token is not empty.
func (n *Node) StartJoining(endpoints []string, token string) error {
	var args []string
	joined := false
	for i := 0; i < len(n.args); i++ {
		if n.args[i] == "--initial-cluster" && i+1 < len(n.args) {
			args = append(args, "--join", strings.Join(endpoints, ","))
			joined = true
			i++
			continue
		}
		args = append(args, n.args[i])
	}
	if !joined { // a spare, started with neither flag
		args = append(args, "--join", strings.Join(endpoints, ","))
	}
	return n.start(args, tokenEnv(token))
}

// StartWithToken is Start with the agent token (RAFTLOCK_AGENT_TOKEN) when token is not
// empty, as the spare needs under --acl to publish its address once it is added.
func (n *Node) StartWithToken(token string) error { return n.start(n.args, tokenEnv(token)) }

// tokenEnv is the environment of an agent given the agent token, nil (inherit) without one.
func tokenEnv(token string) []string {
	if token == "" {
		return nil
	}
	return append(os.Environ(), "RAFTLOCK_AGENT_TOKEN="+token)
}

// ExitCode is the exit status of the node's last process that exited, -1 if a signal ended
// it, 0 before any did.
func (n *Node) ExitCode() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exitCode
}

// WipeData deletes everything in the stopped node's data directory, as a lost disk or a new
// volume leaves it.
func (n *Node) WipeData() error {
	if n.State() != Stopped {
		return fmt.Errorf("%s: %w", n.ID, ErrRunning)
	}
	entries, err := os.ReadDir(n.DataDir)
	if err != nil {
		return fmt.Errorf("cluster: wipe %s: %w", n.ID, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(n.DataDir, e.Name())); err != nil {
			return fmt.Errorf("cluster: wipe %s: %w", n.ID, err)
		}
	}
	return nil
}

func (n *Node) start(args, env []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state != Stopped {
		return fmt.Errorf("%s: %w", n.ID, ErrRunning)
	}
	log, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("cluster: %s: %w", n.ID, err)
	}
	n.starts++
	fmt.Fprintf(log, "=== jepsen: start %d of %s at %s: %s %v\n", n.starts, n.ID, time.Now().Format(time.RFC3339Nano), n.binary, args)
	cmd := exec.Command(n.binary, args...)
	cmd.Stdout, cmd.Stderr, cmd.Env = log, log, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("cluster: start %s: %w", n.ID, err)
	}
	exited := make(chan struct{})
	n.cmd, n.state, n.exited = cmd, Running, exited
	go func() {
		cmd.Wait()
		log.Close()
		n.mu.Lock()
		if n.cmd == cmd {
			n.state = Stopped
			n.exitCode = cmd.ProcessState.ExitCode()
		}
		n.mu.Unlock()
		close(exited)
	}()
	return nil
}

// State is the node's process state.
func (n *Node) State() State {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.state
}

// PID is the current process id, or 0.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.state == Stopped {
		return 0
	}
	return n.cmd.Process.Pid
}

// signal sends sig to the node's process group.
func (n *Node) signal(sig syscall.Signal) (chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.state == Stopped || n.cmd == nil {
		return nil, fmt.Errorf("%s: %w", n.ID, ErrNotRunning)
	}
	if err := syscall.Kill(-n.cmd.Process.Pid, sig); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return n.exited, nil // exited, not yet reaped
		}
		return nil, fmt.Errorf("cluster: signal %s to %s: %w", sig, n.ID, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.state = Paused
	case syscall.SIGCONT:
		n.state = Running
	}
	return n.exited, nil
}

// Kill sends SIGKILL to the process group and waits until the process is reaped.
func (n *Node) Kill(ctx context.Context) error {
	exited, err := n.signal(syscall.SIGKILL)
	if err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("cluster: kill %s: %w", n.ID, ctx.Err())
	}
}

// Pause stops the process with SIGSTOP: it keeps its sockets but runs no code.
func (n *Node) Pause() error {
	_, err := n.signal(syscall.SIGSTOP)
	return err
}

// Resume continues a paused process with SIGCONT.
func (n *Node) Resume() error {
	_, err := n.signal(syscall.SIGCONT)
	return err
}

// Stop shuts the process down gracefully with SIGTERM (resuming it first if paused), and kills
// it if it has not exited when ctx ends.
func (n *Node) Stop(ctx context.Context) error {
	if n.State() == Paused {
		if err := n.Resume(); err != nil {
			return err
		}
	}
	exited, err := n.signal(syscall.SIGTERM)
	if err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-ctx.Done():
	}
	kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Kill(kctx); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	return fmt.Errorf("cluster: %s did not stop gracefully: %w", n.ID, ctx.Err())
}
