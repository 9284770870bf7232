package fsm

import (
	"bytes"
	"fmt"
	"io"
	"slices"

	"github.com/hashicorp/raft"
)

// Positioned is what a snapshot reader may implement to tell the log position of the
// snapshot it reads, so that Restore keeps AppliedIndex true (a restored state applied
// nothing through ApplyBatch). Restore also looks behind the readers raft wraps around the
// snapshot store's.
type Positioned interface {
	SnapshotPosition() (index, term uint64)
}

// positionOf returns the log position r or a reader it wraps tells.
func positionOf(r io.Reader) (index, term uint64, ok bool) {
	for {
		if p, is := r.(Positioned); is {
			index, term = p.SnapshotPosition()
			return index, term, true
		}
		w, is := r.(raft.ReadCloserWrapper)
		if !is {
			return 0, 0, false
		}
		r = w.WrappedReadCloser()
	}
}

// Capture is the state at one point of the log, for a backup: the snapshot and the index and
// term of the last entry it holds. Writing it may take a while; later entries apply meanwhile.
type Capture struct {
	snap *snapshot
	// Index and Term are those of the last entry the captured state holds (0 before any).
	Index, Term uint64
}

// Capture captures the current state, as Snapshot does, with its log position.
func (f *FSM) Capture() *Capture {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &Capture{snap: captureSnapshot(f.st), Index: f.applied.Load(), Term: f.appliedTerm}
}

// WriteTo writes the captured state in the snapshot format (what Restore reads).
func (c *Capture) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	err := c.snap.write(cw)
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// SnapshotSummary describes what a snapshot holds.
type SnapshotSummary struct {
	// Version is the snapshot format version.
	Version int
	// Sessions, Locks (entries: held, awaited or delayed), Held and Waiters count the lock
	// table; Delayed counts the locks under a lock-delay.
	Sessions, Locks, Held, Waiters, Delayed int
	// ACLBootstrapped, ACLTokens and ACLPolicies describe the ACL state (built-in policy not
	// counted).
	ACLBootstrapped        bool
	ACLTokens, ACLPolicies int
	// Members is the published member metadata the snapshot holds.
	Members []Member
	// Features are the features enabled when the snapshot was taken.
	Features []Feature
	// MaxIndex is the highest log index the state records anywhere: a fencing token, a lock's
	// modify index, a session's or an ACL record's create index. Every token the snapshot's
	// cluster issued up to the snapshot is at most this (a grant's token is its own index).
	MaxIndex uint64
}

// InspectSnapshot reads a whole snapshot, checks it as Restore would (format, checksum,
// consistency) and describes it. It needs no running node.
func InspectSnapshot(r io.Reader) (SnapshotSummary, error) {
	st, version, err := readVersioned(r)
	if err != nil {
		return SnapshotSummary{}, err
	}
	return summarize(st, version), nil
}

// readVersioned reads a snapshot into a state and returns its format version too.
func readVersioned(r io.Reader) (*state, byte, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, 0, err
	}
	st, err := readSnapshot(bytes.NewReader(data))
	if err != nil {
		return nil, 0, err
	}
	return st, data[len(snapshotMagic)], nil // readSnapshot checked the length
}

func summarize(st *state, version byte) SnapshotSummary {
	s := SnapshotSummary{
		Version:         int(version),
		Sessions:        len(st.sessions),
		Locks:           len(st.locks),
		Held:            st.held,
		Waiters:         st.waiters,
		ACLBootstrapped: st.acl.bootstrapped,
		ACLTokens:       len(st.acl.tokens),
		ACLPolicies:     len(st.acl.policies),
		Features:        slices.Clone(st.features),
		MaxIndex:        st.freedIndex,
	}
	for _, m := range st.members {
		s.Members = append(s.Members, m)
	}
	sortMembers(s.Members)
	for _, ss := range st.sessions {
		s.MaxIndex = max(s.MaxIndex, ss.createIndex)
	}
	for _, l := range st.locks {
		s.MaxIndex = max(s.MaxIndex, l.modifyIndex, l.token)
		if l.x != nil {
			for _, h := range l.x.more {
				s.MaxIndex = max(s.MaxIndex, h.token)
			}
			for _, d := range l.x.delays {
				s.MaxIndex = max(s.MaxIndex, d.index)
			}
		}
		if l.delayed() {
			s.Delayed++
		}
	}
	for _, p := range st.acl.policies {
		s.MaxIndex = max(s.MaxIndex, p.CreateIndex, p.ModifyIndex)
	}
	for _, t := range st.acl.tokens {
		s.MaxIndex = max(s.MaxIndex, t.CreateIndex)
	}
	return s
}

// RewriteSnapshot reads a snapshot from r and writes to w the same state with the member
// metadata replaced by members and with features enabled besides its own: what a restore into
// a running cluster installs. The members are the running cluster's (the Raft configuration
// stays the running cluster's too, so the snapshot's addresses would be wrong), and the
// features the running cluster enabled stay enabled (a feature is never turned off). It
// returns the summary of what it wrote.
func RewriteSnapshot(r io.Reader, w io.Writer, members []Member, features []Feature) (SnapshotSummary, error) {
	st, _, err := readVersioned(r)
	if err != nil {
		return SnapshotSummary{}, err
	}
	st.members = make(map[string]Member, len(members))
	for _, m := range members {
		if m.ID == "" {
			return SnapshotSummary{}, fmt.Errorf("fsm: rewrite snapshot: %w: member without id", ErrSnapshotCorrupt)
		}
		st.members[m.ID] = m
	}
	sorted := slices.Clone(features)
	slices.Sort(sorted)
	st.features = st.features.with(slices.Compact(sorted))
	if err := captureSnapshot(st).write(w); err != nil {
		return SnapshotSummary{}, err
	}
	return summarize(st, snapshotVersionOf(st.features)), nil
}

// UnknownFeatures returns the features of fs that this state machine cannot apply.
func (f *FSM) UnknownFeatures(fs []Feature) []Feature {
	var out []Feature
	for _, x := range fs {
		if !f.known.has(x) {
			out = append(out, x)
		}
	}
	return out
}

// Restores returns how many snapshots this state machine has installed: a change to it means
// the whole state was replaced, and indexes read before may be ahead of the state now.
func (f *FSM) Restores() uint64 { return f.restores.Load() }
