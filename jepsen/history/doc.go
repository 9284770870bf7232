// Package history records what happened during a jepsen run.
//
// Every client request is one Op with the monotonic time it was invoked and the time it
// completed, its inputs and its outcome: ok, fail (definitely had no effect) or info (unknown:
// it may or may not have taken effect, at any time after its invocation). Faults injected by
// the nemesis are Ops too, so checkers and the report can relate operations to fault intervals.
// A Recorder collects Ops from many goroutines and can stream them as JSON lines.
//
// The package imports only the standard library.
package history
