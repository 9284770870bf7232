//go:build !unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// prepareChild leaves the command in raftlock's group: process groups are a unix notion.
func prepareChild(cmd *exec.Cmd) bool { return false }

// caughtSignals are the signals raftlock catches while a command runs.
func caughtSignals() []os.Signal { return []os.Signal{os.Interrupt} }

// forwardSignal says whether a caught signal is passed on to the command.
func forwardSignal(sig os.Signal, ownGroup bool) bool { return false }

// Signals sent when the lock is lost, and after the grace period (only Kill exists here).
const (
	sigTerminate = syscall.SIGKILL
	sigKill      = syscall.SIGKILL
)

// signalChild sends sig to the command.
func signalChild(p *os.Process, ownGroup bool, sig os.Signal) error { return p.Signal(sig) }

// exitStatus is the command's exit code.
func exitStatus(ps *os.ProcessState) int { return ps.ExitCode() }

// reloadSignals are the signals on which the agent re-reads its TLS files: none here.
func reloadSignals() []os.Signal { return nil }
