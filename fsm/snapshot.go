package fsm

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/raft"
)

// Snapshot format, version 7: the magic "RLSNAP", a version byte, then uvarint-framed records:
// freedIndex, the sessions (each with its fences, owner, attempt floor and ended numbered
// attempts), the locks (each with its grants, limit, mode, lock-delays and queue; see
// appendLock), the members, the ACL state (whether it was bootstrapped, the policies, the
// tokens with their secrets' hashes) and the enabled features, every list but the fences
// sorted, and last the CRC-32C of everything before it. Derived data (a session's held and
// awaited locks, the counters, the tokens by secret) is rebuilt on restore rather than stored.
//
// A snapshot is written in the oldest version that holds what is enabled, so that a node of an
// older version can install it until a feature it lacks is enabled: version 4 (without attempt
// numbers and features) while no feature is enabled, version 5 (each lock with one holder and
// at most one delay) until FeatureSemaphoresRWLocks is, version 6 (no times of grants and queue
// entries) until FeatureGrantTimes is. Older versions still restore: version
// 3 lacks the owners and the ACL state, version 2 the delays' lengths too, version 1 (written
// before attempts existed) the fences as well.
const (
	snapshotMagic   = "RLSNAP"
	snapshotVersion = 7
	// snapshotVersionKinds is the version written while FeatureSemaphoresRWLocks is enabled
	// but FeatureGrantTimes is not: version 7 without the times of grants and queue entries.
	snapshotVersionKinds = 6
	// snapshotVersionFeatures is the version written while FeatureSemaphoresRWLocks is not
	// enabled but another feature is.
	snapshotVersionFeatures = 5
	// snapshotVersionNoFeatures is the version written while no feature is enabled.
	snapshotVersionNoFeatures = 4
)

// Errors of snapshot reading.
var (
	ErrSnapshotMagic    = errors.New("fsm: not a raftlock snapshot")
	ErrSnapshotVersion  = errors.New("fsm: unknown snapshot version")
	ErrSnapshotChecksum = errors.New("fsm: snapshot checksum mismatch")
	ErrSnapshotCorrupt  = errors.New("fsm: snapshot inconsistent")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshot is the state at one point in time, written later. It shares the session and lock
// entries, and the chunks of the tables that hold them, with the live state rather than
// copying them: a session's snapshotted fields never change, and the applier replaces a lock
// entry or a chunk a capture saw instead of changing it (state.own, slots.set), so Persist may
// read them while later entries apply.
type snapshot struct {
	freedIndex uint64
	sessions   slotView[session]
	locks      slotView[lock]
	nSessions  int
	nLocks     int
	members    []Member
	acl        aclSnapshot
	features   featureSet
}

// aclSnapshot is the ACL state at one point in time; its entries are never changed in place.
type aclSnapshot struct {
	bootstrapped bool
	policies     []*Policy
	tokens       []*ACLToken
}

// captureSnapshot takes the tables of st and starts a new generation of it. The apply path
// waits for it, so it copies one pointer per chunk of 1,024 entries; Persist collects the
// entries and sorts them. Copying a pointer per entry took 25-45 ms for 1,000,000 locks on the
// machine of 2026-12-03, and up to 0.48 s while the garbage collector marked (write barriers).
func captureSnapshot(st *state) *snapshot {
	s := &snapshot{
		freedIndex: st.freedIndex,
		sessions:   st.sessionSlots.view(),
		locks:      st.lockSlots.view(),
		nSessions:  len(st.sessions),
		nLocks:     len(st.locks),
		members:    make([]Member, 0, len(st.members)),
		features:   st.features,
	}
	for _, m := range st.members {
		s.members = append(s.members, m)
	}
	s.acl.bootstrapped = st.acl.bootstrapped
	for _, p := range st.acl.policies {
		s.acl.policies = append(s.acl.policies, p)
	}
	for _, t := range st.acl.tokens {
		s.acl.tokens = append(s.acl.tokens, t)
	}
	st.gen++
	return s
}

// Persist writes the snapshot to sink.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds no resources.
func (s *snapshot) Release() {}

// write writes the snapshot in the versioned format.
func (s *snapshot) write(w io.Writer) error {
	sessions := s.sessions.appendTo(make([]*session, 0, s.nSessions))
	slices.SortFunc(sessions, func(a, b *session) int { return bytes.Compare(a.id[:], b.id[:]) })
	locks := s.locks.appendTo(make([]*lock, 0, s.nLocks))
	order := lockOrder(locks)
	sortMembers(s.members)

	crc := crc32.New(castagnoli)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)
	var buf []byte
	flush := func() error {
		_, err := bw.Write(buf)
		buf = buf[:0]
		return err
	}
	version := snapshotVersionOf(s.features)
	buf = append(buf, snapshotMagic...)
	buf = append(buf, version)
	buf = binary.AppendUvarint(buf, s.freedIndex)
	buf = binary.AppendUvarint(buf, uint64(len(sessions)))
	for _, ss := range sessions {
		buf = append(buf, ss.id[:]...)
		buf = appendString(buf, ss.name)
		buf = binary.AppendUvarint(buf, uint64(ss.ttl))
		buf = binary.AppendUvarint(buf, uint64(ss.lockDelay))
		buf = binary.AppendUvarint(buf, ss.createIndex)
		buf = binary.AppendUvarint(buf, uint64(len(ss.fences)))
		for _, f := range ss.fences {
			buf = appendString(buf, f.lock)
			buf = appendString(buf, f.attempt)
		}
		buf = appendString(buf, ss.owner)
		if version > 4 {
			buf = appendEnded(buf, ss)
		}
		if err := flush(); err != nil {
			return err
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(order)))
	for _, k := range order {
		l := locks[k.i]
		buf = appendLock(buf, l, version)
		if err := flush(); err != nil {
			return err
		}
	}
	buf = binary.AppendUvarint(buf, uint64(len(s.members)))
	for _, m := range s.members {
		buf = appendString(buf, m.ID)
		buf = appendString(buf, m.RaftAddr)
		buf = appendString(buf, m.HTTPAddr)
	}
	buf = s.acl.appendTo(buf)
	if version > 4 {
		buf = binary.AppendUvarint(buf, uint64(len(s.features)))
		for _, f := range s.features {
			buf = appendString(buf, string(f))
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := w.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
	return err
}

// lockKey is a lock's place in the name order: 16 bytes of its name (zero-padded, big-endian,
// so that comparing the numbers compares those bytes) and the lock's index in the list.
type lockKey struct {
	hi, lo uint64
	i      int
}

// lockOrder returns the keys of locks sorted by name. Comparing names through the lock
// pointers missed the cache twice per comparison: sorting 1,000,000 locks took nine tenths of
// a snapshot. Keys hold 16 bytes of the name, so that a comparison reads no other memory;
// names equal in those bytes are sorted by their next 16, and so on.
func lockOrder(locks []*lock) []lockKey {
	keys := make([]lockKey, len(locks))
	for i := range keys {
		keys[i].i = i
	}
	sortNames(locks, keys, 0)
	return keys
}

// sortNames sorts keys, whose names are all equal before byte off, by name.
func sortNames(locks []*lock, keys []lockKey, off int) {
	longer := false // whether a name goes on past these 16 bytes
	for j := range keys {
		var b [16]byte
		if name := locks[keys[j].i].name; off < len(name) {
			copy(b[:], name[off:])
			longer = longer || len(name) > off+16
		}
		keys[j].hi, keys[j].lo = binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	}
	slices.SortFunc(keys, func(a, b lockKey) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lo, b.lo); c != 0 || longer {
			return c // with longer, equal runs are sorted below
		}
		// Both names end here and differ, if at all, in trailing zero bytes.
		return strings.Compare(locks[a.i].name, locks[b.i].name)
	})
	if !longer {
		return
	}
	for start := 0; start < len(keys); {
		end := start + 1
		for end < len(keys) && keys[end].hi == keys[start].hi && keys[end].lo == keys[start].lo {
			end++
		}
		if end-start > 1 {
			sortNames(locks, keys[start:end], off+16)
		}
		start = end
	}
}

// Sizer is what a snapshot reader may implement to tell its length, so that Restore reads it
// into one buffer of that size instead of growing one (bytes.Reader does). Restore also looks
// behind the readers raft wraps around the snapshot store's (raft.ReadCloserWrapper).
type Sizer interface {
	Size() int64
}

// sizeOf returns the size r or a reader it wraps tells, or -1.
func sizeOf(r io.Reader) int64 {
	for {
		if s, ok := r.(Sizer); ok {
			return s.Size()
		}
		w, ok := r.(raft.ReadCloserWrapper)
		if !ok {
			return -1
		}
		r = w.WrappedReadCloser()
	}
}

// maxSizeHint bounds the buffer a size hint may allocate up front; past it the buffer grows.
const maxSizeHint = 1 << 30

// readAll reads r to its end, into one allocation when r tells its size. A wrong size costs
// only speed: the buffer grows or is left partly unused.
func readAll(r io.Reader) ([]byte, error) {
	size := sizeOf(r)
	if size <= 0 || size > maxSizeHint {
		return io.ReadAll(r)
	}
	var b bytes.Buffer
	b.Grow(int(size) + bytes.MinRead) // ReadFrom wants MinRead free bytes to see EOF
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}

// readSnapshot reads a whole snapshot into a new state and checks it for consistency.
func readSnapshot(r io.Reader) (*state, error) {
	data, err := readAll(r)
	if err != nil {
		return nil, err
	}
	if len(data) < len(snapshotMagic)+1+4 || string(data[:len(snapshotMagic)]) != snapshotMagic {
		return nil, ErrSnapshotMagic
	}
	version := data[len(snapshotMagic)]
	if version > snapshotVersion {
		// Written by a newer raftlock: a node of this version must refuse to start, not guess.
		return nil, fmt.Errorf("%w: %w %d", ErrNewerFormat, ErrSnapshotVersion, version)
	}
	if version < 1 {
		return nil, fmt.Errorf("%w %d", ErrSnapshotVersion, version)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, castagnoli) != sum {
		return nil, ErrSnapshotChecksum
	}
	d := decoder{buf: body[len(snapshotMagic)+1:]}
	st := newState()
	st.freedIndex = d.uvarint()
	// Every list must be strictly sorted, as write sorts it: this refuses duplicates, and makes
	// the format canonical (whatever restores, snapshots back to the same bytes).
	var prevID SessionID
	n := d.count()
	st.sessions = make(map[SessionID]*session, n) // sized up front: growing it dominated restore
	for ; n > 0 && d.err == nil; n-- {
		ss := &session{id: d.sessionID(), name: d.string(), ttl: d.duration(),
			lockDelay: d.duration(), createIndex: d.uvarint()}
		if version > 1 {
			if err := readFences(&d, ss); err != nil {
				return nil, err
			}
		}
		if version > 3 {
			ss.owner = d.string()
		}
		if version > 4 {
			if err := readEnded(&d, ss); err != nil {
				return nil, err
			}
		}
		if d.err == nil && (ss.id.IsZero() || string(ss.id[:]) <= string(prevID[:])) {
			return nil, fmt.Errorf("%w: session %v zero or out of order", ErrSnapshotCorrupt, ss.id)
		}
		prevID = ss.id
		st.addSession(ss)
	}
	prevName := ""
	n = d.count()
	st.locks = make(map[string]*lock, n)
	for i := 0; uint64(i) < n && d.err == nil; i++ {
		name, err := readLock(&d, st, version, i > 0, prevName)
		if err != nil {
			return nil, err
		}
		prevName = name
	}
	for i, n := 0, d.count(); uint64(i) < n && d.err == nil; i++ {
		m := Member{ID: d.string(), RaftAddr: d.string(), HTTPAddr: d.string()}
		if d.err == nil && i > 0 && m.ID <= prevName {
			return nil, fmt.Errorf("%w: member %q out of order", ErrSnapshotCorrupt, m.ID)
		}
		prevName = m.ID
		st.members[m.ID] = m
	}
	if version > 3 && d.err == nil {
		if err := readACL(&d, &st.acl); err != nil {
			return nil, err
		}
	}
	if version > 4 && d.err == nil {
		if err := readFeatures(&d, st); err != nil {
			return nil, err
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.buf) != 0 {
		return nil, ErrTrailingBytes
	}
	return st, nil
}

// readFences reads a session's fences and checks that apply could have made them: at most
// maxFences, each attempt non-empty and recorded once.
func readFences(d *decoder, ss *session) error {
	n := d.count()
	if n > maxFences {
		return fmt.Errorf("%w: session %v has %d fences", ErrSnapshotCorrupt, ss.id, n)
	}
	for ; n > 0 && d.err == nil; n-- {
		f := fence{lock: d.string(), attempt: d.string()}
		if d.err == nil && (f.attempt == "" || ss.fenced(f.lock, f.attempt)) {
			return fmt.Errorf("%w: session %v: empty or repeated fence", ErrSnapshotCorrupt, ss.id)
		}
		ss.fences = append(ss.fences, f)
	}
	return d.err
}

// appendEnded appends a session's attempt floor and its ended numbered attempts, sorted by
// lock name.
func appendEnded(buf []byte, ss *session) []byte {
	buf = binary.AppendUvarint(buf, ss.attemptFloor)
	buf = binary.AppendUvarint(buf, uint64(len(ss.ended)))
	for _, name := range slices.Sorted(maps.Keys(ss.ended)) {
		buf = appendString(buf, name)
		buf = binary.AppendUvarint(buf, ss.ended[name])
	}
	return buf
}

// readEnded reads what appendEnded wrote and checks that apply could have made it: names
// sorted and unique, every ended attempt at or above the floor.
func readEnded(d *decoder, ss *session) error {
	ss.attemptFloor = d.uvarint()
	prev := ""
	for i, n := 0, d.count(); uint64(i) < n && d.err == nil; i++ {
		name, seq := d.string(), d.uvarint()
		if d.err != nil {
			break
		}
		if i > 0 && name <= prev || seq == 0 || seq < ss.attemptFloor {
			return fmt.Errorf("%w: session %v: ended attempt of %q out of order or below the floor", ErrSnapshotCorrupt, ss.id, name)
		}
		if ss.ended == nil {
			ss.ended = make(map[string]uint64)
		}
		ss.ended[name] = seq
		prev = name
	}
	return d.err
}

// readFeatures reads the enabled features, which must be sorted and unique. A feature this
// version does not know means a newer version wrote the snapshot.
func readFeatures(d *decoder, st *state) error {
	var fs []Feature
	for n := d.count(); n > 0 && d.err == nil; n-- {
		fs = append(fs, Feature(d.string()))
	}
	if d.err != nil {
		return d.err
	}
	if !slices.IsSorted(fs) || len(slices.Compact(slices.Clone(fs))) != len(fs) {
		return fmt.Errorf("%w: features unsorted or repeated", ErrSnapshotCorrupt)
	}
	st.features = fs
	return nil
}

// count reads a record count, bounded by the bytes left so that corrupt input cannot allocate.
func (d *decoder) count() uint64 {
	n := d.uvarint()
	if n > uint64(len(d.buf)) {
		d.fail(ErrShortCommand)
		return 0
	}
	return n
}

func sortMembers(ms []Member) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].ID < ms[j].ID })
}
