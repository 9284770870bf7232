package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// quietLogger logs at debug level the messages that hashicorp/raft gives on every healthy
// start and clean stop, which an operator would otherwise read as faults:
//
//   - "failed to decode incoming command" and "failed to flush response" (raft-net, ERROR)
//     with an error that is net.ErrClosed or raft.ErrTransportShutdown: the node closed its own
//     connection or transport, which it does only as it stops; a peer that goes away gives
//     io.EOF, which raft does not log, and a corrupt or foreign stream gives another error,
//     which stays an ERROR.
//   - "heartbeat timeout reached, starting election" (raft, WARN) with no last leader: the
//     node has not heard from any leader since it started, as every node of a new or
//     restarted cluster, so no leader was lost. With a last leader it stays a WARN: a leader
//     that stopped answering is what an operator must see.
//
// And once the node is stopping (markStopping), it logs at WARN raft's errors about peers that
// do not answer or moved to a newer term (a leader handing over as it stops, members that stop
// at the same time, as when every node is stopped at once): expected then, and not a fault of
// this node. Before the stop they stay ERRORs.
//
// Everything else passes at its own level. Loggers made from it (Named, With) filter alike
// and share its stopping flag.
type quietLogger struct {
	hclog.Logger
	stopping *atomic.Bool
}

// quietRaftNoise wraps l; see quietLogger.
func quietRaftNoise(l hclog.Logger) hclog.Logger { return quietLogger{l, new(atomic.Bool)} }

// markStopping tells log, if it is a quietLogger (or made from one), that the node is stopping.
func markStopping(log hclog.Logger) {
	if q, ok := log.(quietLogger); ok {
		q.stopping.Store(true)
	}
}

// Log implements hclog.Logger.
func (l quietLogger) Log(level hclog.Level, msg string, args ...any) {
	switch {
	case expectedRaftNoise(l.Name(), level, msg, args):
		level = hclog.Debug
	case l.stopping.Load() && expectedWhileStopping(l.Name(), level, msg, args):
		level = hclog.Warn
	}
	l.Logger.Log(level, msg, args...)
}

// Warn implements hclog.Logger.
func (l quietLogger) Warn(msg string, args ...any) { l.Log(hclog.Warn, msg, args...) }

// Error implements hclog.Logger.
func (l quietLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

// Named implements hclog.Logger.
func (l quietLogger) Named(name string) hclog.Logger {
	return quietLogger{l.Logger.Named(name), l.stopping}
}

// ResetNamed implements hclog.Logger.
func (l quietLogger) ResetNamed(name string) hclog.Logger {
	return quietLogger{l.Logger.ResetNamed(name), l.stopping}
}

// With implements hclog.Logger.
func (l quietLogger) With(args ...any) hclog.Logger {
	return quietLogger{l.Logger.With(args...), l.stopping}
}

// expectedRaftNoise reports whether a message of the logger named name is one that
// quietLogger lowers to debug.
func expectedRaftNoise(name string, level hclog.Level, msg string, args []any) bool {
	switch {
	case level == hclog.Error && strings.HasSuffix(name, "raft-net") &&
		(msg == "failed to decode incoming command" || msg == "failed to flush response"):
		err, ok := argValue(args, "error").(error)
		return ok && (errors.Is(err, net.ErrClosed) || errors.Is(err, raft.ErrTransportShutdown))
	case level == hclog.Warn && strings.HasSuffix(name, "raft") && msg == "heartbeat timeout reached, starting election":
		addr := argValue(args, "last-leader-addr")
		return addr != nil && fmt.Sprint(addr) == ""
	}
	return false
}

// peerErrors are raft's ERROR messages about a peer that does not answer, or that moved to a
// newer term: what a node meets while it stops together with the others, or hands its
// leadership over as it stops. (A leader's shutdown snapshot refused while its handover is
// still under way is lowered too, in expectedWhileStopping.)
var peerErrors = []string{
	"failed to make requestVote RPC",
	"failed to appendEntries to",
	"failed to heartbeat to",
	"failed to pipeline appendEntries",
	"failed to make TimeoutNow RPC",
	"failed to send snapshot to",
	"failed to get log",
	"peer has newer term, stopping replication",
	"failed to decode incoming command",
	"failed to flush response",
}

// expectedWhileStopping reports whether a message of the logger named name is one that
// quietLogger lowers to WARN once the node is stopping.
func expectedWhileStopping(name string, level hclog.Level, msg string, args []any) bool {
	if level != hclog.Error || !(strings.HasSuffix(name, "raft") || strings.HasSuffix(name, "raft-net")) {
		return false
	}
	if msg == "failed to take snapshot" {
		// The shutdown snapshot of a leader whose handover did not finish (its peers stop
		// too); the node says so itself, at WARN. A snapshot that fails otherwise stays an ERROR.
		err, ok := argValue(args, "error").(error)
		return ok && errors.Is(err, raft.ErrLeadershipTransferInProgress)
	}
	for _, p := range peerErrors {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// argValue returns the value of key among hclog's key-value args, nil if absent.
func argValue(args []any, key string) any {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return args[i+1]
		}
	}
	return nil
}
