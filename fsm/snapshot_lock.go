package fsm

import (
	"encoding/binary"
	"fmt"
)

// appendLock appends one lock record in the given snapshot format version. Version 7: the
// name, the grants (oldest first: session, token, value, since), the modify index, the limit,
// whether the holds and delays are shared, the lock-delays (until, length, the index that
// names it) and the queue (session, value, whether it asks for a shared hold, since). Version
// 6, written while FeatureGrantTimes is not enabled (so that no grant or queue entry has a
// time): the same without the times. Versions 4 and 5, written
// while FeatureSemaphoresRWLocks is not enabled (so that a lock has at most one grant, one
// delay and no limit or shared hold): the name, a held flag and the grant, the modify index,
// the delay's end (0 for none) and length, and the queue (session, value).
func appendLock(buf []byte, l *lock, version byte) []byte {
	buf = appendString(buf, l.name)
	if version < 6 {
		if l.held() {
			g := &l.grants()[0] // the only one, without FeatureSemaphoresRWLocks
			buf = append(buf, 1)
			buf = append(buf, g.session[:]...)
			buf = binary.AppendUvarint(buf, g.token)
			buf = appendString(buf, g.value)
		} else {
			buf = append(buf, 0)
		}
		buf = binary.AppendUvarint(buf, l.modifyIndex)
		if !l.delayed() {
			buf = binary.AppendVarint(buf, 0)
		} else {
			d := l.x.delays[0]
			buf = binary.AppendVarint(buf, d.until)
			buf = binary.AppendUvarint(buf, uint64(d.length))
		}
		buf = binary.AppendUvarint(buf, uint64(len(l.waiters)))
		for _, w := range l.waiters {
			buf = append(buf, w.session[:]...)
			buf = appendString(buf, w.value)
		}
		return buf
	}
	gs := l.grants()
	buf = binary.AppendUvarint(buf, uint64(len(gs)))
	for i := range gs {
		g := &gs[i]
		buf = append(buf, g.session[:]...)
		buf = binary.AppendUvarint(buf, g.token)
		buf = appendString(buf, g.value)
		if version > 6 {
			buf = binary.AppendVarint(buf, g.since)
		}
	}
	buf = binary.AppendUvarint(buf, l.modifyIndex)
	buf = binary.AppendUvarint(buf, uint64(l.limit()))
	buf = appendBool(buf, l.shared())
	var delays []lockDelay
	if l.x != nil {
		delays = l.x.delays
	}
	buf = binary.AppendUvarint(buf, uint64(len(delays)))
	for _, d := range delays {
		buf = binary.AppendVarint(buf, d.until)
		buf = binary.AppendUvarint(buf, uint64(d.length))
		buf = binary.AppendUvarint(buf, d.index)
	}
	buf = binary.AppendUvarint(buf, uint64(len(l.waiters)))
	for _, w := range l.waiters {
		buf = append(buf, w.session[:]...)
		buf = appendString(buf, w.value)
		buf = appendBool(buf, w.shared)
		if version > 6 {
			buf = binary.AppendVarint(buf, w.since)
		}
	}
	return buf
}

func appendBool(buf []byte, b bool) []byte {
	if b {
		return append(buf, 1)
	}
	return append(buf, 0)
}

// bool reads what appendBool wrote.
func (d *decoder) bool() bool {
	switch d.byte() {
	case 0:
		return false
	case 1:
		return true
	}
	d.fail(fmt.Errorf("%w: bad flag byte", ErrSnapshotCorrupt))
	return false
}

// readLock reads one lock record, checks that it is a state Apply can produce (checkLock),
// and links it to its sessions. The name must sort after prev (when there is one); it is
// returned.
func readLock(d *decoder, st *state, version byte, hasPrev bool, prev string) (string, error) {
	name := d.string()
	l := st.newLock(name)
	// Most locks have one grant and no extension: neither allocates here (restore reads a
	// million of them). The grants go straight to the entry (more than one make its extension).
	var x lockExt
	if version < 6 {
		x.delays = readOldLock(d, l, version)
	} else {
		for n := d.count(); n > 0 && d.err == nil; n-- {
			g := grant{session: d.sessionID(), token: d.uvarint(), value: d.string()}
			if version > 6 {
				g.since = d.varint()
			}
			l.addGrant(g)
		}
		l.modifyIndex = d.uvarint()
		limit := d.uvarint()
		if limit > MaxLimit && d.err == nil {
			d.fail(fmt.Errorf("%w: lock %q limit %d", ErrSnapshotCorrupt, name, limit))
		}
		x.limit = uint32(limit)
		x.shared = d.bool()
		for n := d.count(); n > 0 && d.err == nil; n-- {
			x.delays = append(x.delays, lockDelay{until: d.varint(), length: d.duration(), index: d.uvarint()})
		}
		for n := d.count(); n > 0 && d.err == nil; n-- {
			w := waiter{session: d.sessionID(), value: d.string(), shared: d.bool()}
			if version > 6 {
				w.since = d.varint()
			}
			l.waiters = append(l.waiters, w)
		}
	}
	if d.err != nil {
		return "", d.err
	}
	if hasPrev && name <= prev {
		return "", fmt.Errorf("%w: lock %q out of order", ErrSnapshotCorrupt, name)
	}
	if l.x != nil {
		l.x.limit, l.x.shared, l.x.delays = x.limit, x.shared, x.delays
	} else if !x.empty() {
		ext := x // x itself stays on the stack
		l.x = &ext
	}
	if err := checkLock(l); err != nil {
		return "", fmt.Errorf("%w: lock %q %w", ErrSnapshotCorrupt, name, err)
	}
	if err := linkLock(st, l); err != nil {
		return "", fmt.Errorf("%w: lock %q %w", ErrSnapshotCorrupt, name, err)
	}
	st.addLock(l)
	return name, nil
}

// readOldLock reads the rest of a lock record of version 5 or older into l, and returns its
// delay, if any, in the form of version 6.
func readOldLock(d *decoder, l *lock, version byte) []lockDelay {
	var delays []lockDelay
	switch d.byte() {
	case 0:
	case 1:
		l.addGrant(grant{session: d.sessionID(), token: d.uvarint(), value: d.string()})
	default:
		d.fail(fmt.Errorf("%w: lock %q: bad held flag", ErrSnapshotCorrupt, l.name))
	}
	l.modifyIndex = d.uvarint()
	if until := d.varint(); until != 0 {
		dl := lockDelay{until: until}
		if version > 2 {
			dl.length = d.duration()
		}
		delays = append(delays, dl)
	}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		l.waiters = append(l.waiters, waiter{session: d.sessionID(), value: d.string()})
	}
	return delays
}

// linkLock links l's grants and queue entries to their sessions, which must exist; a session
// holds or awaits a lock once.
func linkLock(st *state, l *lock) error {
	gs := l.grants()
	for i := range gs {
		g := &gs[i]
		ss := st.sessions[g.session]
		if ss == nil {
			return fmt.Errorf("held by unknown session")
		}
		if l.holdOf(g.session) != i {
			return fmt.Errorf("held twice by one session")
		}
		ss.link(l, g)
	}
	if len(gs) > 0 {
		st.held++
	}
	for _, w := range l.waiters {
		ss := st.sessions[w.session]
		if ss == nil {
			return fmt.Errorf("awaited by unknown session")
		}
		if _, dup := ss.waits[l.name]; dup || l.holdOf(w.session) >= 0 {
			return fmt.Errorf("session queued twice or behind itself")
		}
		if ss.waits == nil {
			ss.waits = make(map[string]struct{})
		}
		ss.waits[l.name] = struct{}{}
	}
	st.waiters += len(l.waiters)
	return nil
}
