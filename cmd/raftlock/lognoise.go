package main

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// quietLogger logs at debug level the messages that hashicorp/raft gives on every healthy
// start and clean stop, which an operator would otherwise read as faults:
//
//   - "failed to decode incoming command" (raft-net, ERROR) with an error that is
//     net.ErrClosed: the node closed its own connection, which it does only as it stops; a
//     peer that goes away gives io.EOF, which raft does not log, and a corrupt or foreign
//     stream gives another error, which stays an ERROR.
//   - "heartbeat timeout reached, starting election" (raft, WARN) with no last leader: the
//     node has not heard from any leader since it started, as every node of a new or
//     restarted cluster, so no leader was lost. With a last leader it stays a WARN: a leader
//     that stopped answering is what an operator must see.
//
// Everything else passes at its own level. Loggers made from it (Named, With) filter alike.
type quietLogger struct{ hclog.Logger }

// quietRaftNoise wraps l; see quietLogger.
func quietRaftNoise(l hclog.Logger) hclog.Logger { return quietLogger{l} }

// Log implements hclog.Logger.
func (l quietLogger) Log(level hclog.Level, msg string, args ...any) {
	if expectedRaftNoise(l.Name(), level, msg, args) {
		level = hclog.Debug
	}
	l.Logger.Log(level, msg, args...)
}

// Warn implements hclog.Logger.
func (l quietLogger) Warn(msg string, args ...any) { l.Log(hclog.Warn, msg, args...) }

// Error implements hclog.Logger.
func (l quietLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

// Named implements hclog.Logger.
func (l quietLogger) Named(name string) hclog.Logger { return quietLogger{l.Logger.Named(name)} }

// ResetNamed implements hclog.Logger.
func (l quietLogger) ResetNamed(name string) hclog.Logger {
	return quietLogger{l.Logger.ResetNamed(name)}
}

// With implements hclog.Logger.
func (l quietLogger) With(args ...any) hclog.Logger { return quietLogger{l.Logger.With(args...)} }

// expectedRaftNoise reports whether a message of the logger named name is one that
// quietLogger lowers to debug.
func expectedRaftNoise(name string, level hclog.Level, msg string, args []any) bool {
	switch {
	case level == hclog.Error && strings.HasSuffix(name, "raft-net") && msg == "failed to decode incoming command":
		err, ok := argValue(args, "error").(error)
		return ok && errors.Is(err, net.ErrClosed)
	case level == hclog.Warn && strings.HasSuffix(name, "raft") && msg == "heartbeat timeout reached, starting election":
		addr := argValue(args, "last-leader-addr")
		return addr != nil && fmt.Sprint(addr) == ""
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
