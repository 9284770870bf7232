package fsm

import (
	"fmt"
	"slices"
)

// The feature gate: how a change to the log's or a snapshot's contents, or to how a command
// applies, reaches a cluster whose members run different versions without their states ever
// diverging. Every part of it is here; the leader's side, which asks the members and proposes
// the enabling command, is cluster/features.go.
//
//   - Needing: MissingFeature says which feature a command needs enabled. The proposer
//     (cluster's Node.propose, through Node.gateCommand) refuses a command whose feature is not
//     enabled, so that no entry reaches a member that could not apply it.
//   - Enabling: an EnableFeatures command (enableFeatures), which the leader proposes only once
//     every member reports the feature, enables it for good.
//   - Applying: a node that meets an entry needing or enabling a feature it does not know
//     (unknownFeature) halts, as for ErrNewerFormat, rather than skip it; and Apply clears the
//     fields of features not enabled (withoutDisabled), so that no state holds what the
//     snapshot format of its features cannot.
//   - Snapshots: a state is written in the oldest format that can hold it (snapshotVersionOf),
//     so that the versions before its features can still read it; a restore refuses a
//     snapshot that enabled a feature this node does not know (knowsAll).
//
// Invariants: an enabled feature stays enabled; the enabled set is sorted without repeats and
// replaced, never changed, so that a snapshot may share it; no state holds a field of a feature
// not enabled.

// Feature names a change to what the log or a snapshot may hold, or to how a command applies.
// A node of an older version cannot decode the entries of a feature it lacks, so a leader
// proposes them only once an EnableFeatures command, proposed when every member supports the
// feature, has enabled it: a cluster then upgrades one node at a time and no node meets an
// entry it cannot decode. An enabled feature stays enabled.
type Feature string

// The features of this version, in the order they were added.
const (
	// FeatureAttemptNumbers: acquires, releases and cancels may carry a numbered attempt and
	// a floor (Command.AttemptSeq, Command.AttemptFloor); a session refuses every attempt of a
	// lock at or below the highest it saw end, and every attempt below its floor, and never
	// forgets either. Snapshots are written in version 5.
	FeatureAttemptNumbers Feature = "attempt-numbers"
	// FeatureExpiryTerm: an expiry carries the term of the leader whose timer ran out
	// (Command.Term), and applies only in a log entry of that term.
	FeatureExpiryTerm Feature = "expiry-term"
	// FeatureTokenDeleteDropsWaits: deleting an ACL token also takes the sessions it owns out
	// of every queue, in the same command, so that no wait admitted under the token is granted
	// after the delete.
	FeatureTokenDeleteDropsWaits Feature = "token-delete-drops-waits"
	// FeatureSemaphoresRWLocks: an acquire may carry a limit, making the lock a semaphore that
	// many sessions hold at once (Command.Limit), or ask for a shared hold (Command.Shared);
	// a lock-delay is named by the index of the expiry that started it, and a DelayEnded may
	// name the one it ends (Command.DelayIndex), since a lock may have several; a ServeQueue
	// grants a further waiter when a command freed a lock for several. Snapshots are written
	// in version 6.
	FeatureSemaphoresRWLocks Feature = "semaphores-rwlocks"
	// FeatureAttemptEnds: an attempt ends exactly when the state machine decides it, and an
	// attempt that ended changes nothing more. An acquire refused for good (a try refused
	// lock_held or lock_delayed, any acquire refused limit_mismatch or mode_mismatch) ends
	// its numbered attempt in the same command; a cancel-wait naming an attempt that had
	// already ended takes nothing out of the queue (the session's entry there is a newer
	// attempt's); and a string attempt of the form "~N" is the numbered attempt N, so that a
	// client may number its attempts before the cluster enables numbered ones and have them
	// kept, never forgotten, once it does. Its rules apply once FeatureAttemptNumbers is
	// enabled too (a leader enables both together, every member of this version having both).
	FeatureAttemptEnds Feature = "attempt-ends"
	// FeatureForceRelease: an operator's forced release of a lock (TypeForceRelease) ends the
	// session that holds it under the named token, and holds back every lock that session
	// held for the session's TTL plus its lock-delay, so that nobody is granted one before the
	// holder's client has stopped believing it holds it.
	FeatureForceRelease Feature = "force-release"
	// FeatureGrantTimes: each grant and each queue entry keeps the time of the log entry that
	// made it (raft.Log.AppendedAt, the leader's clock when it appended the entry, which the
	// log stores and replicates, so every node and every replay reads the same), for readers
	// to show who waits and since when; nothing decides on it. Snapshots are written in
	// version 7, with the times. Its times are kept once FeatureSemaphoresRWLocks is enabled
	// too (a leader enables both together, every member of this version having both).
	FeatureGrantTimes Feature = "grant-times"
	// FeaturePeerChannel: every member serves the peer channel on its Raft port (a connection
	// whose first byte is cluster's channel marker), so a follower passes requests to the
	// leader over it rather than as a second HTTP request. Nothing in the log or a snapshot
	// changes with it, and no command applies differently; it is a feature so that followers
	// use the channel only once every member serves it, and keep the HTTP forward in a
	// cluster that still has a member of a version before it.
	FeaturePeerChannel Feature = "peer-channel"
)

// AllFeatures returns every feature this version supports, sorted.
func AllFeatures() []Feature {
	fs := []Feature{FeatureAttemptNumbers, FeatureExpiryTerm, FeatureTokenDeleteDropsWaits, FeatureSemaphoresRWLocks,
		FeatureAttemptEnds, FeatureForceRelease, FeatureGrantTimes, FeaturePeerChannel}
	slices.Sort(fs)
	return fs
}

// featureSet is a sorted list of features without repeats; it is small, and replaced rather
// than changed, so that a snapshot may share it.
type featureSet []Feature

func (s featureSet) has(f Feature) bool {
	_, ok := slices.BinarySearch(s, f)
	return ok
}

// with returns the set with fs added, in a new slice when anything is added.
func (s featureSet) with(fs []Feature) featureSet {
	out := s
	for _, f := range fs {
		if i, ok := slices.BinarySearch(out, f); !ok {
			if len(out) == len(s) {
				out = slices.Clone(s)
			}
			out = slices.Insert(out, i, f)
		}
	}
	return out
}

// Option configures a state machine made by New.
type Option func(*FSM)

// WithFeatures restricts the features this state machine can apply to fs, as a node of an
// older version is restricted. It halts (as ApplyBatch does for ErrNewerFormat) on an
// entry that enables or uses any other; tests use it to stand in for an older version.
func WithFeatures(fs ...Feature) Option {
	return func(f *FSM) { f.known = featureSet(nil).with(fs) }
}

// MissingFeature returns the first feature that c needs the cluster to have enabled (and the
// applying node to know) for which has reports false, or "" if there is none: a command that
// needs no feature can be applied by any version that knows EnableFeatures.
func (c *Command) MissingFeature(has func(Feature) bool) Feature {
	if (c.AttemptSeq != 0 || c.AttemptFloor != 0) && !has(FeatureAttemptNumbers) {
		return FeatureAttemptNumbers
	}
	if c.Type == TypeExpireSession && c.Term != 0 && !has(FeatureExpiryTerm) {
		return FeatureExpiryTerm
	}
	if (c.Limit != 0 || c.Shared || c.DelayIndex != 0 || c.Type == TypeServeQueue) && !has(FeatureSemaphoresRWLocks) {
		return FeatureSemaphoresRWLocks
	}
	if c.Type == TypeForceRelease && !has(FeatureForceRelease) {
		return FeatureForceRelease
	}
	return ""
}

// unknownFeature returns the first feature that c needs or enables and this state machine
// does not know, or "".
func (f *FSM) unknownFeature(c *Command) Feature {
	if r := c.MissingFeature(f.known.has); r != "" {
		return r
	}
	for _, e := range c.Features {
		if !f.known.has(e) {
			return e
		}
	}
	return ""
}

// enableFeatures applies an EnableFeatures command.
func (a *applier) enableFeatures(c *Command) Result {
	if len(c.Features) == 0 || !slices.IsSorted(c.Features) {
		return Result{Status: StatusInvalid}
	}
	if next := a.st.features.with(c.Features); len(next) != len(a.st.features) {
		a.st.features = next
		a.emit(Event{Kind: EventFeaturesChanged})
	}
	return Result{}
}

// Features returns the features enabled in the cluster, sorted.
func (f *FSM) Features() []Feature {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Clone(f.st.features)
}

// FeatureCount returns how many features are enabled in the cluster.
func (f *FSM) FeatureCount() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.st.features)
}

// FeatureEnabled reports whether the feature is enabled in the cluster.
func (f *FSM) FeatureEnabled(feature Feature) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.features.has(feature)
}

// KnownFeatures returns the features this state machine can apply, sorted.
func (f *FSM) KnownFeatures() []Feature { return slices.Clone(f.known) }

// newerFormat is the error with which ApplyBatch halts at an entry this state machine cannot
// apply; err wraps ErrNewerFormat.
func newerFormat(index uint64, err error) error {
	return fmt.Errorf("fsm: log entry %d needs a newer raftlock (%w): upgrade this node", index, err)
}

// withoutDisabled clears the fields of features the cluster has not enabled. A leader proposes
// them only once their feature is enabled, so this changes only commands written by hand; it
// keeps the state from holding anything the snapshot format of its features cannot.
func (a *applier) withoutDisabled(c *Command) {
	if !a.st.features.has(FeatureAttemptNumbers) {
		c.AttemptSeq, c.AttemptFloor = 0, 0
	}
	if !a.st.features.has(FeatureExpiryTerm) {
		c.Term = 0
	}
	if !a.st.features.has(FeatureSemaphoresRWLocks) {
		c.Limit, c.Shared, c.DelayIndex = 0, false, 0
	}
	if c.AttemptSeq == 0 && a.exactAttempts() {
		// The string keeps its fence check too: one cancelled before the rule came.
		c.AttemptSeq = NumberedAttempt(c.Attempt)
	}
}

// snapshotVersionOf returns the format version a state with features fs is written in: the
// oldest that can hold it, so that the versions before the features can still read it.
func snapshotVersionOf(fs featureSet) byte {
	switch {
	case fs.has(FeatureSemaphoresRWLocks) && fs.has(FeatureGrantTimes):
		return snapshotVersion
	case fs.has(FeatureSemaphoresRWLocks):
		return snapshotVersionKinds
	case len(fs) > 0:
		return snapshotVersionFeatures
	}
	return snapshotVersionNoFeatures
}

// knowsAll returns an error wrapping ErrNewerFormat if fs, the features a snapshot enabled,
// has one this state machine cannot apply.
func (f *FSM) knowsAll(fs featureSet) error {
	for _, feature := range fs {
		if !f.known.has(feature) {
			return fmt.Errorf("%w: the snapshot uses feature %q", ErrNewerFormat, feature)
		}
	}
	return nil
}
