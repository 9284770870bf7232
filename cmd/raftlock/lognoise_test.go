package main

import (
	"bytes"
	"io"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/internal/testkit"
)

// The messages of a healthy start and stop go to debug; the same messages when something went
// wrong keep their level.
func TestQuietLoggerLowersOnlyExpectedRaftNoise(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, "info", "text").Named("n1")
	closed := &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}
	log.Named("raft-net").Error("failed to decode incoming command", "error", closed)
	log.Named("raft").Warn("heartbeat timeout reached, starting election",
		"last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID(""))
	log.With("k", "v").Named("raft-net").Log(hclog.Error, "failed to decode incoming command", "error", closed)
	if buf.Len() != 0 {
		t.Fatalf("expected messages logged above debug:\n%s", &buf)
	}
	log.Named("raft-net").Error("failed to decode incoming command", "error", io.ErrUnexpectedEOF)
	log.Named("raft").Warn("heartbeat timeout reached, starting election",
		"last-leader-addr", raft.ServerAddress("127.0.0.1:7101"), "last-leader-id", raft.ServerID("n2"))
	log.Named("http").Error("failed to decode incoming command", "error", closed)
	out := buf.String()
	for _, want := range []string{
		`[ERROR] raftlock.n1.raft-net: failed to decode incoming command: error="unexpected EOF"`,
		`[WARN]  raftlock.n1.raft: heartbeat timeout reached, starting election: last-leader-addr=127.0.0.1:7101`,
		`[ERROR] raftlock.n1.http: failed to decode incoming command`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("a message that is not the expected noise lost its level: want %q in\n%s", want, out)
		}
	}
	debug := newLogger(&buf, "debug", "text").Named("raft-net")
	debug.Error("failed to decode incoming command", "error", closed)
	if !strings.Contains(buf.String(), "[DEBUG] raftlock.raft-net: failed to decode incoming command") {
		t.Errorf("the lowered message is not logged at debug:\n%s", &buf)
	}
}

// A dev cluster that starts and stops cleanly logs neither an election "heartbeat timeout"
// (no leader was lost) nor connections it closed itself as it stopped.
func TestDevStartAndStopLogNoExpectedNoiseAsFaults(t *testing.T) {
	cmd := exec.Command(cliEnv.bin, "dev", "--base-port", "0")
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	testkit.Eventually(t, 30*time.Second, "the dev cluster's banner", func() bool {
		return strings.Contains(stdout.String(), "dev cluster is up")
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("raftlock dev: %v; stderr:\n%s", err, &stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("raftlock dev did not stop on SIGINT; stderr:\n%s", &stderr)
	}
	for _, noise := range []string{"failed to decode incoming command", "heartbeat timeout reached, starting election: last-leader-addr= "} {
		if strings.Contains(stderr.String(), noise) {
			t.Errorf("a clean start and stop logged %q:\n%s", noise, &stderr)
		}
	}
}

// Once the node is stopping, raft's errors about peers that stop too (or moved to a newer
// term as the leader handed over) go to WARN; before, and for other errors, they stay ERRORs.
// Its own closed transport is never an ERROR.
func TestQuietLoggerLowersPeerErrorsOnlyWhileStopping(t *testing.T) {
	var buf bytes.Buffer
	log := newLogger(&buf, "info", "text")
	raftLog := log.Named("n1").Named("raft")
	raftLog.Error("failed to appendEntries to", "peer", "n2", "error", io.EOF)
	log.Named("raft-net").Error("failed to decode incoming command", "error", raft.ErrTransportShutdown)
	markStopping(log)
	raftLog.Error("failed to appendEntries to", "peer", "n3", "error", io.EOF)
	raftLog.Error("peer has newer term, stopping replication", "peer", "n2")
	raftLog.Error("failed to take snapshot", "error", raft.ErrLeadershipTransferInProgress)
	raftLog.Error("failed to take snapshot", "error", io.ErrShortWrite)
	log.Named("cluster").Error("failed to appendEntries to")
	out := buf.String()
	for _, want := range []string{
		`[ERROR] raftlock.n1.raft: failed to appendEntries to: peer=n2`,
		`[WARN]  raftlock.n1.raft: failed to appendEntries to: peer=n3`,
		`[WARN]  raftlock.n1.raft: peer has newer term, stopping replication`,
		`[WARN]  raftlock.n1.raft: failed to take snapshot: error="leadership transfer in progress"`,
		`[ERROR] raftlock.n1.raft: failed to take snapshot: error="short write"`,
		`[ERROR] raftlock.cluster: failed to appendEntries to`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "transport shutdown") {
		t.Errorf("the node's own closed transport logged above debug:\n%s", out)
	}
}
