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
