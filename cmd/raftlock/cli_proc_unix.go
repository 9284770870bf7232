//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/mattn/go-isatty"
)

// prepareChild puts the command in a process group of its own, so that SIGTERM and SIGKILL
// reach everything it started (a script's children too). When stdin is a terminal the command
// stays in raftlock's group instead, so that it can read the terminal and gets Ctrl-C from it
// directly. It reports whether the command has its own group.
func prepareChild(cmd *exec.Cmd) bool {
	if isatty.IsTerminal(os.Stdin.Fd()) {
		return false
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return true
}

// caughtSignals are the signals raftlock catches while a command runs, so that it outlives
// the command and releases the lock after it.
func caughtSignals() []os.Signal {
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}
}

// forwardSignal says whether a caught signal is passed on: always to a command with its own
// group; otherwise only SIGTERM, since the terminal already sent the others to the command.
func forwardSignal(sig os.Signal, ownGroup bool) bool {
	return ownGroup || sig == syscall.SIGTERM
}

// Signals sent when the lock is lost, and after the grace period.
const (
	sigTerminate = syscall.SIGTERM
	sigKill      = syscall.SIGKILL
)

// signalChild sends sig to the command's process group, or to the command alone.
func signalChild(p *os.Process, ownGroup bool, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if ownGroup && ok {
		return syscall.Kill(-p.Pid, s)
	}
	return p.Signal(sig)
}

// exitStatus is the command's exit code, or 128+N when signal N killed it (as shells report).
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// reloadSignals are the signals on which the agent re-reads its TLS files.
func reloadSignals() []os.Signal { return []os.Signal{syscall.SIGHUP} }
