package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"time"
)

// childSpec describes the command run under a lock.
type childSpec struct {
	argv   []string
	env    []string // added to raftlock's own environment
	grace  time.Duration
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// childResult is how the command ended.
type childResult struct {
	code int   // exit code, 128+N for signal N
	lost error // why the hold ended while the command ran, nil if it did not
}

// runChild runs the command until it exits. When hold is done first (the lock or leadership
// is lost), the command gets SIGTERM, and SIGKILL after the grace period. Signals sent to
// raftlock meanwhile are passed on, and raftlock waits for the command to exit.
func runChild(spec childSpec, hold context.Context) (childResult, error) {
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Env = append(os.Environ(), spec.env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.stdin, spec.stdout, spec.stderr
	ownGroup := prepareChild(cmd)

	sigCh := make(chan os.Signal, 4)
	signal.Notify(sigCh, caughtSignals()...)
	defer signal.Stop(sigCh)

	if err := hold.Err(); err != nil {
		return childResult{}, &exitError{code: exitLockLost, msg: fmt.Sprintf("lock lost before the command started: %s", errText(context.Cause(hold)))}
	}
	if err := cmd.Start(); err != nil {
		return childResult{}, &exitError{code: execExitCode(err), msg: fmt.Sprintf("cannot run %s: %v", spec.argv[0], err)}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	var res childResult
	lostCh := hold.Done()
	var killC <-chan time.Time
	for {
		select {
		case err := <-done:
			if cmd.ProcessState == nil {
				return res, &exitError{code: exitFailure, msg: fmt.Sprintf("waiting for %s: %v", spec.argv[0], err)}
			}
			res.code = exitStatus(cmd.ProcessState)
			if res.lost != nil && ownGroup {
				// Nothing the command started may go on without the lock.
				_ = signalChild(cmd.Process, true, sigKill)
			}
			return res, nil
		case sig := <-sigCh:
			if forwardSignal(sig, ownGroup) {
				_ = signalChild(cmd.Process, ownGroup, sig)
			}
		case <-lostCh:
			lostCh = nil
			res.lost = context.Cause(hold)
			_ = signalChild(cmd.Process, ownGroup, sigTerminate)
			t := time.NewTimer(spec.grace)
			defer t.Stop()
			killC = t.C
		case <-killC:
			killC = nil
			_ = signalChild(cmd.Process, ownGroup, sigKill)
		}
	}
}
