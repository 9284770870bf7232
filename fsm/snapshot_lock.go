package fsm

import (
	"encoding/binary"
	"fmt"
)

// appendLock appends one lock record in the given snapshot format version. Version 6: the
// name, the grants (oldest first: session, token, value), the modify index, the limit, whether
// the holds and delays are shared, the lock-delays (until, length, the index that names it)
// and the queue (session, value, whether it asks for a shared hold). Versions 4 and 5, written
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

// readLock reads one lock record, checks that it is a state Apply can produce, and links it
// to its sessions. The name must sort after prev (when there is one); it is returned.
func readLock(d *decoder, st *state, version byte, hasPrev bool, prev string) (string, error) {
	name := d.string()
	l := st.newLock(name)
	// Most locks have one grant and no extension: neither allocates here (restore reads a
	// million of them).
	var one [1]HolderInfo
	grants := one[:0]
	var x lockExt
	if version < 6 {
		grants, x.delays = readOldLock(d, l, version, grants)
	} else {
		for n := d.count(); n > 0 && d.err == nil; n-- {
			grants = append(grants, HolderInfo{Session: d.sessionID(), Token: d.uvarint(), Value: d.string()})
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
			l.waiters = append(l.waiters, waiter{session: d.sessionID(), value: d.string(), shared: d.bool()})
		}
	}
	if d.err != nil {
		return "", d.err
	}
	if hasPrev && name <= prev {
		return "", fmt.Errorf("%w: lock %q out of order", ErrSnapshotCorrupt, name)
	}
	if err := checkLockRecord(l, grants, &x); err != nil {
		return "", fmt.Errorf("%w: lock %q %w", ErrSnapshotCorrupt, name, err)
	}
	if !x.empty() {
		ext := x
		l.x = &ext
	}
	if err := linkLock(st, l, grants); err != nil {
		return "", fmt.Errorf("%w: lock %q %w", ErrSnapshotCorrupt, name, err)
	}
	st.addLock(l)
	return name, nil
}

// readOldLock reads the rest of a lock record of version 5 or older, and returns its grant,
// appended to grants, and its delay, if any, in the form of version 6.
func readOldLock(d *decoder, l *lock, version byte, grants []HolderInfo) ([]HolderInfo, []lockDelay) {
	var delays []lockDelay
	switch d.byte() {
	case 0:
	case 1:
		grants = append(grants, HolderInfo{Session: d.sessionID(), Token: d.uvarint(), Value: d.string()})
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
	return grants, delays
}

// checkLockRecord checks that a lock's grants, extension and queue are a state Apply can
// produce, in the one form write gives it.
func checkLockRecord(l *lock, grants []HolderInfo, x *lockExt) error {
	n := len(grants) + len(x.delays)
	switch {
	case x.limit == 1:
		return fmt.Errorf("has limit 1 (a lock is written as 0)")
	case x.limit > 0 && (x.shared || n > int(x.limit)):
		return fmt.Errorf("limit %d with %d grants and delays, shared %v", x.limit, n, x.shared)
	case x.limit == 0 && !x.shared && n > 1:
		return fmt.Errorf("%d exclusive grants and delays", n)
	case x.shared && n == 0:
		return fmt.Errorf("shared without grants or delays")
	}
	for i, g := range grants {
		// A grant sets its token and the modify index to its index; tokens only grow.
		if g.Token == 0 || g.Token > l.modifyIndex || i > 0 && g.Token <= grants[i-1].Token {
			return fmt.Errorf("token %d, modify index %d", g.Token, l.modifyIndex)
		}
	}
	for i, dl := range x.delays {
		if dl.until == 0 || dl.index > l.modifyIndex || dl.index == 0 && len(x.delays) > 1 ||
			i > 0 && dl.index <= x.delays[i-1].index {
			return fmt.Errorf("delay %d until %d, index %d out of order or unnamed", i, dl.until, dl.index)
		}
	}
	probe := &lock{inline: len(grants) == 1, x: x}
	if len(grants) > 1 {
		probe.x = &lockExt{limit: x.limit, shared: x.shared, grants: make([]grant, len(grants)), delays: x.delays}
	}
	switch {
	case n == 0 && len(l.waiters) == 0:
		// Apply removes an idle entry.
		return fmt.Errorf("neither held, delayed nor awaited")
	case len(l.waiters) > 0 && x.limit == 0 && !l.waiters[0].shared && probe.fits(false):
		// A command that frees a lock grants it to the first waiter. (Only a shared waiter or
		// a semaphore's may wait for its ServeQueue: see applier.grantNext.)
		return fmt.Errorf("its first waiter could be granted")
	}
	for _, w := range l.waiters {
		if w.shared && x.limit > 0 {
			return fmt.Errorf("a semaphore with a shared waiter")
		}
	}
	return nil
}

// linkLock makes grants the lock's grants and links them, and its queue entries, to their
// sessions, which must exist; a session holds or awaits a lock once.
func linkLock(st *state, l *lock, grants []HolderInfo) error {
	for _, g := range grants {
		ss := st.sessions[g.Session]
		if ss == nil {
			return fmt.Errorf("held by unknown session")
		}
		if l.holdOf(g.Session) >= 0 {
			return fmt.Errorf("held twice by one session")
		}
		ss.link(l, l.addGrant(grant{session: g.Session, token: g.Token, value: g.Value}))
	}
	if l.held() {
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
