package fsm

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Waiter is one queue entry as tests see it.
type Waiter struct {
	Session SessionID
	Value   string
	Shared  bool
}

// Waiters returns the queue of the named lock, in order; for tests that must check what the
// read API does not show.
func Waiters(f *FSM, name string) []Waiter {
	f.mu.RLock()
	defer f.mu.RUnlock()
	l := f.st.locks[name]
	if l == nil {
		return nil
	}
	out := make([]Waiter, len(l.waiters))
	for i, w := range l.waiters {
		out[i] = Waiter{w.session, w.value, w.shared}
	}
	return out
}

// CheckIntegrity recounts the state and checks that the derived data (each session's held and
// awaited locks, the counters) agrees with the lock table and that no stored state breaks a
// rule (see checkLock): grants and delays within the lock's limit and mode, live holders
// that are not in their own queue, live waiters queued once, no idle lock entry, no waiter
// that could be granted; and that the entries are in their canonical form.
func CheckIntegrity(f *FSM) error {
	f.mu.RLock()
	defer f.mu.RUnlock()
	st := f.st
	held, waiters := 0, 0
	wantLocks := map[SessionID]map[string]bool{}
	wantWaits := map[SessionID]map[string]bool{}
	add := func(m map[SessionID]map[string]bool, id SessionID, name string) {
		if m[id] == nil {
			m[id] = map[string]bool{}
		}
		m[id][name] = true
	}
	names := make([]string, 0, len(st.locks))
	for name := range st.locks {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		l := st.locks[name]
		if l.name != name {
			return fmt.Errorf("lock %q: entry named %q", name, l.name)
		}
		if err := checkLock(l); err != nil {
			return fmt.Errorf("lock %q: %w", name, err)
		}
		var grants []HolderInfo
		for i := range l.holds() {
			grants = append(grants, l.holderInfo(i))
		}
		if l.held() {
			held++
		}
		for _, g := range grants {
			if st.sessions[g.Session] == nil {
				return fmt.Errorf("lock %q: held by dead session %v", name, g.Session)
			}
			if wantLocks[g.Session][name] {
				return fmt.Errorf("lock %q: held twice by %v", name, g.Session)
			}
			add(wantLocks, g.Session, name)
		}
		seen := map[SessionID]bool{}
		for _, w := range l.waiters {
			waiters++
			if seen[w.session] {
				return fmt.Errorf("lock %q: session %v queued twice", name, w.session)
			}
			seen[w.session] = true
			if l.holdOf(w.session) >= 0 {
				return fmt.Errorf("lock %q: holder %v in its own queue", name, w.session)
			}
			if st.sessions[w.session] == nil {
				return fmt.Errorf("lock %q: dead session %v queued", name, w.session)
			}
			add(wantWaits, w.session, name)
		}
	}
	if held != st.held || waiters != st.waiters {
		return fmt.Errorf("counters held=%d waiters=%d, recount held=%d waiters=%d", st.held, st.waiters, held, waiters)
	}
	for id, ss := range st.sessions {
		if ss.id != id {
			return fmt.Errorf("session %v stored under %v", ss.id, id)
		}
		if err := checkHeldList(st, ss, wantLocks[id]); err != nil {
			return fmt.Errorf("session %v held locks: %w", id, err)
		}
		if err := sameSet(ss.waits, wantWaits[id]); err != nil {
			return fmt.Errorf("session %v waits: %w", id, err)
		}
		if len(ss.fences) > maxFences || ss.gen > st.gen {
			return fmt.Errorf("session %v: %d fences, generation %d of %d", id, len(ss.fences), ss.gen, st.gen)
		}
		for i, f := range ss.fences {
			if f.attempt == "" || slices.Contains(ss.fences[:i], f) {
				return fmt.Errorf("session %v: fence %d %+v empty or repeated", id, i, f)
			}
		}
	}
	for id, m := range st.members {
		if m.ID != id {
			return fmt.Errorf("member %q stored under %q", m.ID, id)
		}
	}
	if err := checkACL(st); err != nil {
		return err
	}
	if err := checkSlots(&st.lockSlots, st.locks, func(l *lock) uint32 { return l.slot }); err != nil {
		return fmt.Errorf("lock slots: %w", err)
	}
	if err := checkSlots(&st.sessionSlots, st.sessions, func(ss *session) uint32 { return ss.slot }); err != nil {
		return fmt.Errorf("session slots: %w", err)
	}
	return nil
}

// checkSlots checks that a slot table holds the entries of its map, each at the position the
// entry records, and nothing else; and that its free positions are empty and listed once.
func checkSlots[K comparable, T any](t *slots[T], m map[K]*T, slot func(*T) uint32) error {
	if n := len(t.view().appendTo(nil)); n != len(m) {
		return fmt.Errorf("holds %d entries, the map %d", n, len(m))
	}
	for k, p := range m {
		pos := slot(p)
		if pos >= t.end || t.chunks[pos>>slotBits][pos&(slotChunkLen-1)] != p {
			return fmt.Errorf("entry %v not at its position %d", k, pos)
		}
	}
	free := map[uint32]bool{}
	for _, pos := range t.free {
		if pos >= t.end || free[pos] || t.chunks[pos>>slotBits][pos&(slotChunkLen-1)] != nil {
			return fmt.Errorf("free position %d out of range, listed twice or not empty", pos)
		}
		free[pos] = true
	}
	if int(t.end) != len(m)+len(t.free) {
		return fmt.Errorf("%d positions used, %d entries and %d free", t.end, len(m), len(t.free))
	}
	return nil
}

// checkHeldList checks that ss's list of held locks is well linked, has each lock of want
// once, and nothing else.
func checkHeldList(st *state, ss *session, want map[string]bool) error {
	seen := map[string]bool{}
	var prev *lock
	for l := ss.held; l != nil; {
		i := l.holdOf(ss.id)
		switch {
		case st.locks[l.name] != l:
			return fmt.Errorf("lock %q: not the entry of the lock table", l.name)
		case i < 0:
			return fmt.Errorf("lock %q: listed but not held", l.name)
		case l.grants()[i].prev != prev:
			return fmt.Errorf("lock %q: back link broken", l.name)
		case seen[l.name] || !want[l.name]:
			return fmt.Errorf("lock %q listed twice or not held", l.name)
		}
		seen[l.name] = true
		prev, l = l, l.grants()[i].next
	}
	if len(seen) != len(want) {
		return fmt.Errorf("lists %d locks, holds %d", len(seen), len(want))
	}
	return nil
}

func sameSet(got map[string]struct{}, want map[string]bool) error {
	if len(got) != len(want) {
		return fmt.Errorf("has %v, want %v", sortedKeys(got), want)
	}
	for k := range got {
		if !want[k] {
			return fmt.Errorf("has %v, want %v", sortedKeys(got), want)
		}
	}
	return nil
}

// checkACL checks the ACL state and the owner counts: policies valid and stored under their
// names, tokens indexed by accessor and by secret alike, naming stored policies once each.
func checkACL(st *state) error {
	acl := &st.acl
	for name, p := range acl.policies {
		if p.Name != name || !validPolicy(p) || p.CreateIndex > p.ModifyIndex {
			return fmt.Errorf("policy %q: %+v", name, p)
		}
	}
	if len(acl.bySecret) != len(acl.tokens) {
		return fmt.Errorf("%d tokens, %d by secret", len(acl.tokens), len(acl.bySecret))
	}
	for acc, t := range acl.tokens {
		if t.AccessorID != acc || acc == "" || acl.bySecret[t.SecretHash] != t {
			return fmt.Errorf("token %q: stored as %q or not indexed by its secret", acc, t.AccessorID)
		}
		if acl.tokenPolicies(t.Policies) != StatusOK || t.Policies != nil && len(t.Policies) == 0 {
			return fmt.Errorf("token %q: policies %v", acc, t.Policies)
		}
	}
	owned := map[string]int{}
	for _, ss := range st.sessions {
		if ss.owner != "" {
			owned[ss.owner]++
		}
	}
	if len(owned) != len(st.owned) {
		return fmt.Errorf("owner counts %v, recount %v", st.owned, owned)
	}
	for o, n := range owned {
		if st.owned[o] != n {
			return fmt.Errorf("owner counts %v, recount %v", st.owned, owned)
		}
	}
	return nil
}

// AttemptRecords returns what the session remembers of its ended numbered attempts: its
// floor and, for each lock, the highest attempt that ended above it.
func AttemptRecords(f *FSM, id SessionID) (floor uint64, ended map[string]uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	ss := f.st.sessions[id]
	if ss == nil {
		return 0, nil
	}
	return ss.attemptFloor, maps.Clone(ss.ended)
}
