package api

// LockChanges is the body of a prefix watch, GET /v1/locks?prefix=P&index=N: the changes of
// the locks under P after index N, in log order, each the lock's state right after the
// command that changed it (ModifyIndex is that command's index; a lock it left free reads as
// free, "held": false); or, when Reset is set, the whole prefix as GET /v1/locks?prefix=P
// shows it (held or awaited locks only: one left out is free). Index is the index to watch
// from next.
type LockChanges struct {
	Locks []Lock `json:"locks"`
	Index uint64 `json:"index"`
	Reset bool   `json:"reset"`
}

// Streamed watches (Server-Sent Events): GET /v1/locks?prefix=P&index=N with Accept:
// text/event-stream (or stream=1), or POST /v1/watch with a WatchRequest. Each event's data is
// one line of JSON: a StreamReset, a StreamChange, a StreamProgress, or for an end an ErrorBody.

// The names of a streamed watch's events.
const (
	EventReset    = "reset"
	EventChange   = "change"
	EventProgress = "progress"
	EventEnd      = "end"
)

// The reasons of a StreamReset.
const (
	ResetStart    = "start"    // index 0: the state, then the changes after it
	ResetTooOld   = "too_old"  // the node no longer remembers every change after the index
	ResetRestored = "restored" // the node installed a snapshot or backup: the stream ends
	ResetBehind   = "behind"   // the watcher read too slowly and was dropped: the stream ends
)

// MaxWatchPrefixes bounds the prefixes of one stream.
const MaxWatchPrefixes = 1000

// HeaderLastEventID is the header with which a stream's client resumes after the last event
// it handled (what a browser's EventSource sends when it reconnects).
const HeaderLastEventID = "Last-Event-ID"

// WatchRequest is the body of POST /v1/watch: the prefixes one stream follows, and the index
// after which it begins (0: with the state, a reset).
type WatchRequest struct {
	Prefixes []string `json:"prefixes,omitempty"`
	Index    uint64   `json:"index,omitempty"`
}

// StreamReset is a reset event's data. With Locks (an empty list included) it is the whole
// state of the stream's prefixes, at least as new as Index, and the stream goes on with the
// changes after Index; without (nil) it ends the stream, and the watcher resumes from the last
// event id it handled.
type StreamReset struct {
	Index  uint64 `json:"index"`
	Reason string `json:"reason"`
	Locks  []Lock `json:"locks,omitempty"`
}

// StreamChange is a change event's data: what the command at Index did to the locks under the
// stream's prefixes.
type StreamChange struct {
	Index uint64 `json:"index"`
	Locks []Lock `json:"locks"`
}

// StreamProgress is a progress event's data: every change up to Index was sent, and the node
// has applied its log up to AppliedIndex. LeaderSilentMs, set only when the node has heard
// from no leader for longer than an election timeout, is how long (milliseconds, rounded up)
// it has not: changes committed meanwhile may not have reached it.
type StreamProgress struct {
	Index          uint64 `json:"index"`
	AppliedIndex   uint64 `json:"applied_index"`
	LeaderSilentMs int64  `json:"leader_silent_ms,omitempty"`
}
