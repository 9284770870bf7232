package fsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand"
	"slices"
	"testing"
	"time"
)

// rawSnap writes the snapshot format record by record, exactly as given: unsorted, duplicated
// or inconsistent if asked, with a valid checksum. It is written from the format's description,
// so it also pins the format that write produces. version is 4 if 0; version 3 has no owners
// and no ACL state, version 2 no delay lengths either, version 1 no fences; versions 5 and 6
// add each session's attempt floor and ended attempts (none here) and the features, and
// version 6 writes locks in its own form (see rawLock).
type rawSnap struct {
	version      byte
	freed        uint64
	sessions     []session
	locks        []rawLock
	members      []Member
	bootstrapped byte
	policies     []Policy
	tokens       []ACLToken
	features     []Feature
}

// rawLock is one lock record. Versions 1 to 5 write heldFlag, holder, token, value, delay and
// delayFor; version 6 writes grants, limit, sharedFlag and delays instead.
type rawLock struct {
	name     string
	heldFlag byte
	holder   SessionID
	token    uint64
	value    string
	modify   uint64
	delay    int64
	delayFor time.Duration
	waiters  []waiter

	grants     []HolderInfo
	limit      uint64
	sharedFlag byte
	delays     []lockDelay
}

// appendRawLock6 writes l in the lock record form of version 6.
func appendRawLock6(b []byte, l rawLock) []byte {
	b = appendString(b, l.name)
	b = binary.AppendUvarint(b, uint64(len(l.grants)))
	for _, g := range l.grants {
		b = append(b, g.Session[:]...)
		b = binary.AppendUvarint(b, g.Token)
		b = appendString(b, g.Value)
	}
	b = binary.AppendUvarint(b, l.modify)
	b = binary.AppendUvarint(b, l.limit)
	b = append(b, l.sharedFlag)
	b = binary.AppendUvarint(b, uint64(len(l.delays)))
	for _, d := range l.delays {
		b = binary.AppendVarint(b, d.until)
		b = binary.AppendUvarint(b, uint64(d.length))
		b = binary.AppendUvarint(b, d.index)
	}
	b = binary.AppendUvarint(b, uint64(len(l.waiters)))
	for _, w := range l.waiters {
		b = append(b, w.session[:]...)
		b = appendString(b, w.value)
		if w.shared {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
	}
	return b
}

func (r rawSnap) bytes() []byte {
	version := r.version
	if version == 0 {
		version = 4
	}
	b := append([]byte("RLSNAP"), version)
	b = binary.AppendUvarint(b, r.freed)
	b = binary.AppendUvarint(b, uint64(len(r.sessions)))
	for _, s := range r.sessions {
		b = append(b, s.id[:]...)
		b = appendString(b, s.name)
		b = binary.AppendUvarint(b, uint64(s.ttl))
		b = binary.AppendUvarint(b, uint64(s.lockDelay))
		b = binary.AppendUvarint(b, s.createIndex)
		if version > 1 {
			b = binary.AppendUvarint(b, uint64(len(s.fences)))
			for _, f := range s.fences {
				b = appendString(b, f.lock)
				b = appendString(b, f.attempt)
			}
		}
		if version > 3 {
			b = appendString(b, s.owner)
		}
		if version > 4 {
			b = append(b, 0, 0) // no attempt floor, no ended attempts
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.locks)))
	for _, l := range r.locks {
		if version > 5 {
			b = appendRawLock6(b, l)
			continue
		}
		b = appendString(b, l.name)
		b = append(b, l.heldFlag)
		if l.heldFlag != 0 {
			b = append(b, l.holder[:]...)
			b = binary.AppendUvarint(b, l.token)
			b = appendString(b, l.value)
		}
		b = binary.AppendUvarint(b, l.modify)
		b = binary.AppendVarint(b, l.delay)
		if version > 2 && l.delay != 0 {
			b = binary.AppendUvarint(b, uint64(l.delayFor))
		}
		b = binary.AppendUvarint(b, uint64(len(l.waiters)))
		for _, w := range l.waiters {
			b = append(b, w.session[:]...)
			b = appendString(b, w.value)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.members)))
	for _, m := range r.members {
		b = appendString(b, m.ID)
		b = appendString(b, m.RaftAddr)
		b = appendString(b, m.HTTPAddr)
	}
	if version > 3 {
		b = append(b, r.bootstrapped)
		b = binary.AppendUvarint(b, uint64(len(r.policies)))
		for _, p := range r.policies {
			b = appendString(b, p.Name)
			b = append(b, byte(p.Operator))
			b = binary.AppendUvarint(b, uint64(len(p.Locks)))
			for _, l := range p.Locks {
				b = appendString(b, l.Prefix)
				b = append(b, byte(l.Access))
			}
			b = binary.AppendUvarint(b, p.CreateIndex)
			b = binary.AppendUvarint(b, p.ModifyIndex)
		}
		b = binary.AppendUvarint(b, uint64(len(r.tokens)))
		for _, t := range r.tokens {
			b = appendString(b, t.AccessorID)
			b = append(b, t.SecretHash[:]...)
			b = appendString(b, t.Description)
			b = binary.AppendUvarint(b, uint64(len(t.Policies)))
			for _, n := range t.Policies {
				b = appendString(b, n)
			}
			b = binary.AppendUvarint(b, t.CreateIndex)
		}
	}
	if version > 4 {
		b = binary.AppendUvarint(b, uint64(len(r.features)))
		for _, f := range r.features {
			b = appendString(b, string(f))
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func id(n byte) SessionID { return SessionID{15: n} }

// validRaw is a consistent state: s1 holds a (s2 waiting), b is delayed with s3 waiting, and
// s2 cancelled two attempts; the ACLs are bootstrapped, with two policies and three tokens,
// and s1 and s2 have owners.
func validRaw() rawSnap {
	return rawSnap{
		freed: 9,
		sessions: []session{
			{id: id(1), name: "one", ttl: 10 * time.Second, createIndex: 1, owner: "acc-jobs"},
			{id: id(2), ttl: 5 * time.Second, lockDelay: time.Second, createIndex: 2, owner: "acc-gone",
				fences: []fence{{"z", "try-2"}, {"a", "try-1"}}},
			{id: id(3), ttl: 5 * time.Second, createIndex: 3},
		},
		locks: []rawLock{
			{name: "a", heldFlag: 1, holder: id(1), token: 4, value: "v", modify: 6, waiters: []waiter{{session: id(2), value: "w"}}},
			{name: "b", modify: 8, delay: 1e18, delayFor: time.Second, waiters: []waiter{{session: id(3)}}},
		},
		members:      []Member{{"n1", "r1", "h1"}, {"n2", "r2", "h2"}},
		bootstrapped: 1,
		policies: []Policy{
			{Name: "jobs", Locks: []LockRule{{"jobs/", AccessWrite}, {"jobs/secret/", AccessDeny}}, CreateIndex: 3, ModifyIndex: 7},
			{Name: "ops", Operator: AccessRead, CreateIndex: 4, ModifyIndex: 4},
		},
		tokens: []ACLToken{
			{AccessorID: "acc-jobs", SecretHash: HashSecret("s-jobs"), Description: "jobs", Policies: []string{"jobs", "ops"}, CreateIndex: 5},
			{AccessorID: "acc-none", SecretHash: HashSecret("s-none"), CreateIndex: 8},
			{AccessorID: "acc-root", SecretHash: HashSecret("s-root"), Description: "Bootstrap", Policies: []string{ManagementPolicy}, CreateIndex: 2},
		},
	}
}

func TestSnapshotFormatIsPinned(t *testing.T) {
	raw := validRaw().bytes()
	st, err := readSnapshot(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("valid raw snapshot refused: %v", err)
	}
	var out bytes.Buffer
	if err := captureSnapshot(st).write(&out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), raw) {
		t.Fatalf("write no longer produces format version 4:\n got % x\nwant % x", out.Bytes(), raw)
	}
	if st.held != 1 || st.waiters != 2 || st.freedIndex != 9 {
		t.Fatalf("restored counters held=%d waiters=%d freed=%d", st.held, st.waiters, st.freedIndex)
	}
	if x := st.locks["b"].x; x == nil || len(x.delays) != 1 || x.delays[0] != (lockDelay{until: 1e18, length: time.Second}) {
		t.Fatalf("restored delays %+v", x)
	}
	if ss := st.sessions[id(2)]; !ss.fenced("z", "try-2") || !ss.fenced("a", "try-1") || ss.fenced("a", "try-2") {
		t.Fatalf("restored fences %v", ss.fences)
	}
	if st.sessions[id(1)].owner != "acc-jobs" || st.owned["acc-jobs"] != 1 || st.owned["acc-gone"] != 1 || len(st.owned) != 2 {
		t.Fatalf("restored owners: %q, counts %v", st.sessions[id(1)].owner, st.owned)
	}
	tok := st.acl.bySecret[HashSecret("s-jobs")]
	if !st.acl.bootstrapped || tok == nil || tok.AccessorID != "acc-jobs" || len(st.acl.tokens) != 3 || len(st.acl.bySecret) != 3 {
		t.Fatalf("restored ACL state: bootstrapped %v, token %+v", st.acl.bootstrapped, tok)
	}
	if got := st.acl.authorizer(tok).Lock("jobs/secret/x"); got != AccessDeny {
		t.Fatalf("restored policy gives %v on jobs/secret/x", got)
	}
}

// A node upgraded in place restores the snapshot its older version wrote, and writes it back
// in the current format without what the old one lacked: fences (version 1), the lengths of
// delays (versions 1 and 2), which then read back as unknown (0), and session owners and ACL
// state (versions 1 to 3): sessions without owner, ACLs not bootstrapped.
func TestOlderSnapshotsRestore(t *testing.T) {
	for _, version := range []byte{1, 2, 3} {
		old := validRaw()
		old.version = version
		st, err := readSnapshot(bytes.NewReader(old.bytes()))
		if err != nil {
			t.Fatalf("version %d refused: %v", version, err)
		}
		var out bytes.Buffer
		if err := captureSnapshot(st).write(&out); err != nil {
			t.Fatal(err)
		}
		want := validRaw()
		if version < 3 {
			want.locks[1].delayFor = 0
		}
		if version == 1 {
			want.sessions[1].fences = nil
		}
		want.bootstrapped, want.policies, want.tokens = 0, nil, nil
		for i := range want.sessions {
			want.sessions[i].owner = ""
		}
		if !bytes.Equal(out.Bytes(), want.bytes()) {
			t.Fatalf("version %d rewritten as\n% x\nwant\n% x", version, out.Bytes(), want.bytes())
		}
		if _, err := readSnapshot(bytes.NewReader(out.Bytes())); err != nil {
			t.Fatalf("version %d rewritten, then refused: %v", version, err)
		}
	}
}

func TestRestoreRefusesInconsistentSnapshots(t *testing.T) {
	cases := map[string]func(r *rawSnap){
		"lock held by unknown session": func(r *rawSnap) { r.locks[0].holder = id(9) },
		"lock awaited by unknown session": func(r *rawSnap) {
			r.locks[1].waiters = append(r.locks[1].waiters, waiter{session: id(9)})
		},
		"zero session id":     func(r *rawSnap) { r.sessions = append([]session{{ttl: time.Second}}, r.sessions...) },
		"duplicate session":   func(r *rawSnap) { r.sessions = append(r.sessions, r.sessions[2]) },
		"sessions unsorted":   func(r *rawSnap) { r.sessions[0], r.sessions[1] = r.sessions[1], r.sessions[0] },
		"duplicate lock":      func(r *rawSnap) { r.locks[1].name = "a" },
		"locks unsorted":      func(r *rawSnap) { r.locks[0].name = "c" },
		"duplicate member":    func(r *rawSnap) { r.members[1].ID = "n1" },
		"members unsorted":    func(r *rawSnap) { r.members[0].ID = "n3" },
		"bad held flag":       func(r *rawSnap) { r.locks[0].heldFlag = 2 },
		"held and delayed":    func(r *rawSnap) { r.locks[0].delay = 5 },
		"token after modify":  func(r *rawSnap) { r.locks[0].token = r.locks[0].modify + 1 },
		"token zero":          func(r *rawSnap) { r.locks[0].token = 0 },
		"idle lock entry":     func(r *rawSnap) { r.locks[1].delay, r.locks[1].waiters = 0, nil },
		"free with a queue":   func(r *rawSnap) { r.locks[1].delay = 0 },
		"holder in own queue": func(r *rawSnap) { r.locks[0].waiters = append(r.locks[0].waiters, waiter{session: id(1)}) },
		"empty attempt":       func(r *rawSnap) { r.sessions[0].fences = []fence{{"a", ""}} },
		"repeated fence":      func(r *rawSnap) { r.sessions[1].fences[1] = r.sessions[1].fences[0] },
		"too many fences": func(r *rawSnap) {
			for i := range maxFences + 1 {
				r.sessions[0].fences = append(r.sessions[0].fences, fence{"a", fmt.Sprint(i)})
			}
		},
		"bad bootstrapped flag": func(r *rawSnap) { r.bootstrapped = 2 },
		"policies unsorted":     func(r *rawSnap) { r.policies[0], r.policies[1] = r.policies[1], r.policies[0] },
		"duplicate policy":      func(r *rawSnap) { r.policies[1].Name = "jobs" },
		"management stored":     func(r *rawSnap) { r.policies[1].Name = ManagementPolicy },
		"empty policy name":     func(r *rawSnap) { r.policies[0].Name = "" },
		"repeated prefix":       func(r *rawSnap) { r.policies[0].Locks[1].Prefix = "jobs/" },
		"modified before made":  func(r *rawSnap) { r.policies[0].CreateIndex = 8 },
		"tokens unsorted":       func(r *rawSnap) { r.tokens[0], r.tokens[1] = r.tokens[1], r.tokens[0] },
		"duplicate accessor":    func(r *rawSnap) { r.tokens[1].AccessorID = "acc-jobs" },
		"empty accessor":        func(r *rawSnap) { r.tokens[0].AccessorID = "" },
		"repeated secret":       func(r *rawSnap) { r.tokens[1].SecretHash = r.tokens[0].SecretHash },
		"unknown token policy":  func(r *rawSnap) { r.tokens[0].Policies = []string{"nope"} },
		"token policy repeated": func(r *rawSnap) { r.tokens[0].Policies = []string{"jobs", "jobs"} },
		"queued twice": func(r *rawSnap) {
			r.locks[1].waiters = append(r.locks[1].waiters, waiter{session: id(3), value: "again"})
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			r := validRaw()
			damage(&r)
			_, err := readSnapshot(bytes.NewReader(r.bytes()))
			if !errors.Is(err, ErrSnapshotCorrupt) {
				t.Fatalf("restore: %v, want ErrSnapshotCorrupt", err)
			}
		})
	}
}

// lockOrder must give the byte order of the names, whichever part of them the prefix holds:
// names shorter and longer than it, equal up to it, differing only past it, and names with
// zero bytes (which the prefix's padding must not confuse with an end).
func TestLockOrderIsTheNameOrder(t *testing.T) {
	names := []string{"", "\x00", "\x00\x00", "a", "a\x00", "a\x00\x00b", "ab", "b", "\xff", "\xff\xff",
		"0123456789abcdef", "0123456789abcdef\x00", "0123456789abcdefg", "0123456789abcdeg",
		"0123456789abcde", "0123456789abcde\x00", "0123456789abcde\xff", "jobs/0000001", "jobs/0000010"}
	rng := rand.New(rand.NewSource(1))
	for range 2000 {
		b := make([]byte, rng.Intn(24))
		for i := range b {
			b[i] = "\x00a\xff"[rng.Intn(3)]
		}
		names = append(names, string(b), "services/payments/"+string(b))
	}
	locks := make([]*lock, len(names))
	for i, n := range names {
		locks[i] = &lock{name: n}
	}
	rng.Shuffle(len(locks), func(i, j int) { locks[i], locks[j] = locks[j], locks[i] })
	want := slices.Clone(names)
	slices.Sort(want)
	for i, k := range lockOrder(locks) {
		if got := locks[k.i].name; got != want[i] {
			t.Fatalf("place %d: %q, want %q", i, got, want[i])
		}
	}
}

// BenchmarkLockOrder sorts 1,000,000 lock names of 12 bytes, and of 30 bytes that share their
// first 18, so that most comparisons fall back to the names.
func BenchmarkLockOrder(b *testing.B) {
	for _, shape := range []struct{ name, format string }{{"short", "jobs/%07d"}, {"shared-prefix", "services/payments/shard-%07d"}} {
		b.Run(shape.name, func(b *testing.B) {
			rng := rand.New(rand.NewSource(1))
			locks := make([]*lock, 1_000_000)
			for i := range locks {
				locks[i] = &lock{name: fmt.Sprintf(shape.format, i)}
			}
			rng.Shuffle(len(locks), func(i, j int) { locks[i], locks[j] = locks[j], locks[i] })
			for b.Loop() {
				_ = lockOrder(locks)
			}
		})
	}
}
