package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/fsm"
)

// sampleCommands returns at least one command of every type, with empty, small and extreme
// field values; it seeds the fuzz corpus too.
func sampleCommands() []fsm.Command {
	long := strings.Repeat("x", 300) // a length that needs a two-byte varint
	return []fsm.Command{
		{Type: fsm.TypeCreateSession, Session: sid(1), Name: "worker-7", TTL: 10 * time.Second, LockDelay: 15 * time.Second},
		{Type: fsm.TypeCreateSession, Session: sid(2)},
		{Type: fsm.TypeCreateSession, Session: sid(3), Name: long, TTL: 1<<63 - 1, LockDelay: 1<<63 - 1},
		{Type: fsm.TypeDestroySession, Session: sid(1)},
		{Type: fsm.TypeExpireSession, Session: sid(1), Now: now0},
		{Type: fsm.TypeExpireSession, Session: sid(1), Now: -1},
		{Type: fsm.TypeExpireSession, Session: sid(1), Now: -1 << 63},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "jobs/nightly", Now: now0},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "jobs/nightly", Value: "host-a:8080", SetValue: true, Now: now0},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Queue: true, Now: 1<<63 - 1},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Value: "", SetValue: true, Queue: true},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: long, Value: long + long, SetValue: true, Queue: true, Now: now0},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Queue: true, Attempt: "a1", Now: now0},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Value: "v", SetValue: true, Attempt: long, Now: now0},
		{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: 42},
		{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: 1<<64 - 1},
		{Type: fsm.TypeCancelWait, Session: sid(1), Lock: "L"},
		{Type: fsm.TypeCancelWait, Session: sid(1), Lock: "L", Attempt: "a1"},
		{Type: fsm.TypeDelayEnded, Lock: "L", Now: now0},
		{Type: fsm.TypeSetMember, Member: fsm.Member{ID: "n1", RaftAddr: "127.0.0.1:7101", HTTPAddr: "127.0.0.1:7001"}},
		{Type: fsm.TypeSetMember},
		{Type: fsm.TypeRemoveMember, Member: fsm.Member{ID: "n1"}},
		{Type: fsm.TypeCreateSession, Session: sid(4), TTL: time.Second, Owner: "acc-1"},
		{Type: fsm.TypeACLBootstrap, ACLToken: fsm.ACLToken{AccessorID: "acc-root", SecretHash: fsm.HashSecret("root"), Description: "Bootstrap"}},
		{Type: fsm.TypeACLBootstrap},
		{Type: fsm.TypeACLCreateToken, ACLToken: fsm.ACLToken{AccessorID: "acc-1", SecretHash: fsm.HashSecret("s1"), Description: "d", Policies: []string{"jobs", fsm.ManagementPolicy}}},
		{Type: fsm.TypeACLCreateToken, ACLToken: fsm.ACLToken{AccessorID: long, SecretHash: fsm.HashSecret(long)}},
		{Type: fsm.TypeACLDeleteToken, ACLToken: fsm.ACLToken{AccessorID: "acc-1"}},
		{Type: fsm.TypeACLSetPolicy, CreateOnly: true, Policy: fsm.Policy{Name: "jobs", Operator: fsm.AccessRead,
			Locks: []fsm.LockRule{{Prefix: "jobs/", Access: fsm.AccessWrite}, {Prefix: "", Access: fsm.AccessRead}, {Prefix: long, Access: fsm.AccessDeny}}}},
		{Type: fsm.TypeACLSetPolicy, Policy: fsm.Policy{Name: "empty"}},
		{Type: fsm.TypeACLDeletePolicy, Policy: fsm.Policy{Name: "jobs"}},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Queue: true, AttemptSeq: 7, Now: now0},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", AttemptSeq: 1<<64 - 1, AttemptFloor: 3, Attempt: "a1", Value: "v", SetValue: true},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", AttemptFloor: 300},
		{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: 42, AttemptSeq: 300},
		{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: 42, AttemptSeq: 3, AttemptFloor: 2, Attempt: long},
		{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", AttemptFloor: 1},
		{Type: fsm.TypeCancelWait, Session: sid(1), Lock: "L", AttemptSeq: 9, AttemptFloor: 9},
		{Type: fsm.TypeCancelWait, Session: sid(1), Lock: "L", AttemptSeq: 1, Attempt: "a1"},
		{Type: fsm.TypeExpireSession, Session: sid(1), Now: now0, Term: 7},
		{Type: fsm.TypeExpireSession, Session: sid(1), Now: -1, Term: 1<<64 - 1},
		{Type: fsm.TypeEnableFeatures, Features: []fsm.Feature{fsm.FeatureAttemptNumbers, fsm.FeatureExpiryTerm}},
		{Type: fsm.TypeEnableFeatures, Features: fsm.AllFeatures()},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "S", Limit: 3, Now: now0},
		{Type: fsm.TypeAcquire, Session: sid(1), Lock: "S", Limit: 1 << 31, Queue: true, AttemptSeq: 4, AttemptFloor: 2, Attempt: "a1", Value: "v", SetValue: true},
		{Type: fsm.TypeAcquire, Session: sid(2), Lock: "R", Shared: true, Queue: true, AttemptSeq: 5},
		{Type: fsm.TypeAcquire, Session: sid(2), Lock: "R", Shared: true, Limit: 1},
		{Type: fsm.TypeDelayEnded, Lock: "S", Now: now0, DelayIndex: 12},
		{Type: fsm.TypeDelayEnded, Lock: "S", Now: -1, DelayIndex: 1<<64 - 1},
		{Type: fsm.TypeServeQueue, Lock: "R"},
		{Type: fsm.TypeForceRelease, Session: sid(3), Lock: "L", Token: 42, Now: now0},
	}
}

func TestCommandRoundTrip(t *testing.T) {
	types := map[fsm.CommandType]bool{}
	for _, c := range sampleCommands() {
		types[c.Type] = true
		b := c.Encode(nil)
		got, err := fsm.DecodeCommand(b)
		if err != nil {
			t.Fatalf("decode %+v: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, c)
		}
		// Encode appends: a prefix in dst is kept.
		if pre := c.Encode([]byte("pre")); !bytes.Equal(pre, append([]byte("pre"), b...)) {
			t.Fatalf("Encode does not append to dst")
		}
	}
	if len(types) != 17 {
		t.Fatalf("samples cover %d command types, want 17", len(types))
	}
}

func TestCommandEncodingIsCompact(t *testing.T) {
	// Version byte, type byte, 16-byte id, length-prefixed name, flags, varint time.
	c := fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "jobs/nightly", Now: now0}
	if n := len(c.Encode(nil)); n != 2+16+1+len("jobs/nightly")+1+9 {
		t.Fatalf("acquire encodes to %d bytes", n)
	}
	if b := c.Encode(nil); b[0] != 1 || b[1] != byte(fsm.TypeAcquire) {
		t.Fatalf("header % x", b[:2])
	}
}

func TestAcquireWithoutValueDropsStrayValue(t *testing.T) {
	// Value is only encoded when SetValue says the request carried one.
	c := fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Value: "stray"}
	got, err := fsm.DecodeCommand(c.Encode(nil))
	if err != nil || got.Value != "" || got.SetValue {
		t.Fatalf("decoded %+v, %v", got, err)
	}
}

func TestDecodeRefusesMalformedCommands(t *testing.T) {
	valid := fsm.Command{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: 300}
	enc := valid.Encode(nil)
	hugeLen := append([]byte{1, byte(fsm.TypeCancelWait)}, make([]byte, 16)...)
	hugeLen = append(hugeLen, 0x81, 0x80, 0x80, 0x01) // 2 MiB string length, no bytes
	negTTL := (&fsm.Command{Type: fsm.TypeCreateSession, Session: sid(1), TTL: -time.Second}).Encode(nil)
	badFlags := (&fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L"}).Encode(nil)
	badFlags[2+16+1+1] = 0x08
	limited := (&fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Limit: 2}).Encode(nil)
	zeroLimit := append(append([]byte(nil), limited[:len(limited)-2]...), 0x00, 0x00) // limit 0, Now 0
	hugeLimit := append(append([]byte(nil), limited[:len(limited)-2]...), 0x80, 0x80, 0x80, 0x80, 0x10, 0x00)
	named := (&fsm.Command{Type: fsm.TypeDelayEnded, Lock: "L", DelayIndex: 5}).Encode(nil)
	emptyAttempt := (&fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L", Attempt: "a"}).Encode(nil)
	emptyAttempt = append(emptyAttempt[:2+16+1+1+1], 0x00, 0x00) // the attempt's length 0, Now 0
	cancel := (&fsm.Command{Type: fsm.TypeCancelWait, Session: sid(1), Lock: "L"}).Encode(nil)
	create := (&fsm.Command{Type: fsm.TypeCreateSession, Session: sid(1), TTL: time.Second}).Encode(nil)
	policy := (&fsm.Command{Type: fsm.TypeACLSetPolicy, Policy: fsm.Policy{Name: "p", Locks: []fsm.LockRule{{Prefix: "a", Access: fsm.AccessRead}}}}).Encode(nil)
	badAccess := append([]byte(nil), policy...)
	badAccess[len(badAccess)-1] = 3
	badOperator := append([]byte(nil), policy...)
	badOperator[2+1+2] = 3
	badPolicyFlags := append([]byte(nil), policy...)
	badPolicyFlags[2] = 2
	token := (&fsm.Command{Type: fsm.TypeACLCreateToken, ACLToken: fsm.ACLToken{AccessorID: "a", Policies: []string{"p"}}}).Encode(nil)
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, fsm.ErrShortCommand},
		{"version only", []byte{1}, fsm.ErrShortCommand},
		{"unknown version", []byte{2, byte(fsm.TypeRelease)}, fsm.ErrUnknownVersion},
		{"version zero", append([]byte{0}, enc[1:]...), fsm.ErrUnknownVersion},
		{"unknown type", []byte{1, 0}, fsm.ErrUnknownCommand},
		{"type past the last", []byte{1, byte(fsm.TypeForceRelease) + 1}, fsm.ErrUnknownCommand},
		{"truncated id", enc[:10], fsm.ErrShortCommand},
		{"truncated string", enc[:2+16+1], fsm.ErrShortCommand},
		{"truncated varint", enc[:len(enc)-1], fsm.ErrShortCommand},
		{"trailing byte", append((&fsm.Command{Type: fsm.TypeRelease, Session: sid(1), Lock: "L", Token: 300, Attempt: "a"}).Encode(nil), 0), fsm.ErrTrailingBytes},
		{"string too long", hugeLen, fsm.ErrFieldTooLong},
		{"negative duration", negTTL, fsm.ErrInvalidDuration},
		{"varint overflow", append(append([]byte(nil), enc[:2+16+2]...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f), fsm.ErrShortCommand},
		{"unknown acquire flags", badFlags, nil},
		{"empty attempt in an acquire", emptyAttempt, fsm.ErrNonCanonical},
		{"empty attempt in a cancel-wait", append(cancel, 0x00), fsm.ErrNonCanonical},
		{"empty attempt in a release", append(append([]byte(nil), enc...), 0x00), fsm.ErrNonCanonical},
		{"non-canonical token", append(append([]byte(nil), enc[:len(enc)-1]...), 0x82, 0x00), fsm.ErrNonCanonical},
		{"non-canonical zero length", append(append([]byte(nil), enc[:2+16]...), 0x80, 0x00), fsm.ErrNonCanonical},
		{"empty owner", append(append([]byte(nil), create...), 0x00), fsm.ErrNonCanonical},
		{"unknown access level", badAccess, fsm.ErrNewerFormat},
		{"unknown operator level", badOperator, fsm.ErrNewerFormat},
		{"unknown set-policy flags", badPolicyFlags, fsm.ErrNewerFormat},
		{"truncated secret hash", token[:2+2+10], fsm.ErrShortCommand},
		{"policy count past the end", append(append([]byte(nil), token[:len(token)-3]...), 0x05), fsm.ErrShortCommand},
		{"non-canonical signed time", append((&fsm.Command{Type: fsm.TypeDelayEnded}).Encode(nil)[:3], 0xc6, 0x00), fsm.ErrNonCanonical},
		{"limit flag with limit 0", zeroLimit, fsm.ErrNonCanonical},
		{"limit past 32 bits", hugeLimit, fsm.ErrOutOfRange},
		{"named delay end naming 0", append(named[:len(named)-1], 0x00), fsm.ErrNonCanonical},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := fsm.DecodeCommand(tc.b)
			if err == nil {
				t.Fatalf("decoded %+v from % x", c, tc.b)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if !reflect.DeepEqual(c, fsm.Command{}) && tc.want != fsm.ErrUnknownVersion && tc.want != fsm.ErrUnknownCommand {
				t.Fatalf("failed decode returned a partial command %+v", c)
			}
		})
	}
}

func TestDecodeErrorsReturnResultErr(t *testing.T) {
	h, _, before := oneHolder(t, "L", "v")
	h.rec.take()
	for i, b := range [][]byte{nil, {1}, {1, byte(fsm.TypeDestroySession), 1, 2}, {1, byte(fsm.TypeCancelWait)}} {
		index := uint64(100 + i)
		res := h.f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: b})
		r, ok := res.(fsm.Result)
		if !ok {
			t.Fatalf("Apply returned %T", res)
		}
		if r.Err == nil || r.Index != index {
			t.Fatalf("apply % x: %+v, want an error at index %d", b, r, index)
		}
	}
	if got := snapshotBytes(t, h.f); !bytes.Equal(got, before) {
		t.Fatal("undecodable commands changed the state")
	}
	if ev := h.rec.take(); len(ev) != 0 {
		t.Fatalf("undecodable commands emitted %+v", ev)
	}
}

// An entry in a format a newer version writes (a higher version byte, a new command type or
// flag) stops the node instead of being skipped: the nodes of that version apply it, and a node
// that skipped it would go on from a different state.
func TestEntryFromANewerVersionStopsTheNode(t *testing.T) {
	_, a, _ := oneHolder(t, "L", "v")
	newFlag := (&fsm.Command{Type: fsm.TypeAcquire, Session: a, Lock: "L"}).Encode(nil)
	newFlag[2+16+1+1] |= 0x80
	newFeature := (&fsm.Command{Type: fsm.TypeEnableFeatures, Features: []fsm.Feature{"from-the-future"}}).Encode(nil)
	for i, b := range [][]byte{{2, byte(fsm.TypeRelease)}, {1, byte(fsm.TypeForceRelease) + 1}, newFlag, newFeature} {
		h, _, _ := oneHolder(t, "L", "v")
		before := h.f.Lock("L")
		mustHalt(t, h.f, uint64(100+i), b)
		if got := h.f.ApplyCommand(200, fsm.Command{Type: fsm.TypeRelease, Session: a, Lock: "L"}); !errors.Is(got.Err, fsm.ErrNewerFormat) {
			t.Fatalf("an entry after the halt: %+v, want it refused", got)
		}
		if got := h.f.Lock("L"); !reflect.DeepEqual(got, before) {
			t.Fatalf("lock after the halt %+v, before %+v: entries of a newer format changed the state", got, before)
		}
		if _, err := h.f.Snapshot(); !errors.Is(err, fsm.ErrNewerFormat) {
			t.Fatalf("snapshot of a halted state machine: %v, want refused", err)
		}
	}
}

// mustHalt applies the entry b at index, which f cannot apply, and checks that f halts there
// (instead of panicking, which a node's supervisor would restart into the same panic): the
// entry is answered with the error that Halted keeps, naming it, and not applied.
func mustHalt(t *testing.T, f *fsm.FSM, index uint64, b []byte) {
	t.Helper()
	before := f.AppliedIndex()
	r := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: b}).(fsm.Result)
	want := fmt.Sprintf("log entry %d needs a newer raftlock", index)
	if !errors.Is(r.Err, fsm.ErrNewerFormat) || !strings.Contains(r.Err.Error(), want) {
		t.Fatalf("apply % x: %+v, want %q", b, r, want)
	}
	if err := f.Halted(); !errors.Is(err, fsm.ErrNewerFormat) || !strings.Contains(err.Error(), want) {
		t.Fatalf("halted: %v, want %q", err, want)
	}
	if f.AppliedIndex() != before {
		t.Fatalf("applied index %d after the halt, want %d as before", f.AppliedIndex(), before)
	}
}

func TestApplyIgnoresEntriesThatAreNotCommands(t *testing.T) {
	f := fsm.New(nil)
	if f.AppliedIndex() != 0 {
		t.Fatalf("new FSM applied index %d", f.AppliedIndex())
	}
	create := fsm.Command{Type: fsm.TypeCreateSession, Session: sid(1), TTL: time.Second}
	acquire := fsm.Command{Type: fsm.TypeAcquire, Session: sid(1), Lock: "L"}
	out := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogConfiguration, Data: []byte("not a command")},
		{Index: 2, Type: raft.LogCommand, Data: create.Encode(nil)},
		{Index: 3, Type: raft.LogNoop},
		{Index: 4, Type: raft.LogCommand, Data: acquire.Encode(nil)},
		{Index: 5, Type: raft.LogBarrier},
	})
	if len(out) != 5 || out[0] != nil || out[2] != nil || out[4] != nil {
		t.Fatalf("batch results %#v", out)
	}
	if r := out[3].(fsm.Result); r.Status != fsm.StatusOK || r.Token != 4 || r.Index != 4 {
		t.Fatalf("acquire in batch: %+v", r)
	}
	if got := f.AppliedIndex(); got != 5 {
		t.Fatalf("applied index %d after a batch ending at 5", got)
	}
	if r := f.Apply(&raft.Log{Index: 6, Type: raft.LogConfiguration}); r != nil {
		t.Fatalf("Apply of a configuration entry returned %#v", r)
	}
	if r := f.Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: []byte{1}}).(fsm.Result); r.Err == nil {
		t.Fatalf("undecodable command applied: %+v", r)
	}
	if got := f.AppliedIndex(); got != 7 {
		t.Fatalf("applied index %d, want 7: an undecodable entry is still applied", got)
	}
}

func TestParseSessionID(t *testing.T) {
	id := sid(0x1234)
	s := id.String()
	if len(s) != 32 || s != strings.ToLower(s) {
		t.Fatalf("String() = %q", s)
	}
	got, err := fsm.ParseSessionID(s)
	if err != nil || got != id {
		t.Fatalf("ParseSessionID(%q) = %v, %v", s, got, err)
	}
	if got, err := fsm.ParseSessionID(strings.ToUpper(s)); err != nil || got != id {
		t.Fatalf("upper case: %v, %v", got, err)
	}
	for _, bad := range []string{"", s[:31], s + "0", "zz" + s[2:], strings.Repeat("0", 32)} {
		if _, err := fsm.ParseSessionID(bad); !errors.Is(err, fsm.ErrInvalidSessionID) {
			t.Errorf("ParseSessionID(%q): %v, want ErrInvalidSessionID", bad, err)
		}
	}
	if !(fsm.SessionID{}).IsZero() || id.IsZero() {
		t.Fatal("IsZero wrong")
	}
}

func TestStatusString(t *testing.T) {
	want := map[fsm.Status]string{
		fsm.StatusOK: "ok", fsm.StatusSessionNotFound: "session_not_found", fsm.StatusLockHeld: "lock_held",
		fsm.StatusLockDelayed: "lock_delayed", fsm.StatusQueued: "queued", fsm.StatusNotHolder: "not_holder",
		fsm.StatusNotQueued: "not_queued", fsm.StatusCancelled: "cancelled", fsm.StatusExists: "exists",
		fsm.StatusAttemptCancelled: "attempt_cancelled", fsm.StatusAlreadyBootstrapped: "already_bootstrapped",
		fsm.StatusNotFound: "not_found", fsm.StatusPolicyNotFound: "policy_not_found",
		fsm.StatusBuiltinPolicy: "builtin_policy", fsm.StatusInvalid: "invalid",
		fsm.StatusLastManagement: "last_management", fsm.StatusStaleTerm: "stale_term",
		fsm.StatusLimitMismatch: "limit_mismatch", fsm.StatusModeMismatch: "mode_mismatch", fsm.Status(200): "status(200)",
	}
	for s, name := range want {
		if s.String() != name {
			t.Errorf("Status(%d).String() = %q, want %q", s, s.String(), name)
		}
	}
}

// FuzzDecodeCommand checks that decoding never panics, that whatever decodes re-encodes to
// exactly the same bytes (one command, one encoding), and that applying a decoded command to
// a populated state machine never panics or breaks its integrity.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range sampleCommands() {
		f.Add(c.Encode(nil))
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := fsm.DecodeCommand(b)
		if err != nil {
			if !reflect.DeepEqual(c, fsm.Command{}) && !errors.Is(err, fsm.ErrUnknownVersion) && !errors.Is(err, fsm.ErrUnknownCommand) {
				t.Fatalf("error %v with partial command %+v", err, c)
			}
			return
		}
		if re := c.Encode(nil); !bytes.Equal(re, b) {
			t.Fatalf("decoded %+v re-encodes to\n% x, input was\n% x", c, re, b)
		}
		h := fuzzState(t)
		res := h.f.Apply(&raft.Log{Index: h.index + 1, Type: raft.LogCommand, Data: b}).(fsm.Result)
		if res.Index != h.index+1 {
			t.Fatalf("result %+v", res)
		}
		if err := fsm.CheckIntegrity(h.f); err != nil {
			t.Fatalf("after applying %+v: %v", c, err)
		}
	})
}

// fuzzState builds a small state with held, awaited and delayed locks, using the ids and names
// of sampleCommands so that fuzzed commands hit existing entries.
func fuzzState(t testing.TB) *harness {
	h := newHarness(t)
	h.createDelay(sid(1), time.Second)
	h.create(sid(2))
	h.create(sid(3))
	h.acquire(sid(1), "L", "v")
	h.queue(sid(2), "L", "")
	h.acquire(sid(1), "D", "")
	h.queue(sid(3), "D", "")
	h.expire(sid(1), now0) // D delayed with a waiter; L handed to sid(2)
	h.acquire(sid(3), "jobs/nightly", "")
	h.queue(sid(2), "jobs/nightly", "")
	// A semaphore and a read/write lock, under those names of sampleCommands.
	h.apply(enable(fsm.FeatureSemaphoresRWLocks))
	h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(2), Lock: "S", Limit: 3})
	h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(3), Lock: "S", Limit: 3})
	h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(2), Lock: "R", Shared: true})
	h.apply(fsm.Command{Type: fsm.TypeAcquire, Session: sid(3), Lock: "R", Queue: true})
	// The ACL names of sampleCommands: a bootstrap, the policy jobs and a token using it.
	h.apply(fsm.Command{Type: fsm.TypeACLBootstrap, ACLToken: fsm.ACLToken{AccessorID: "acc-root", SecretHash: fsm.HashSecret("root")}})
	h.apply(fsm.Command{Type: fsm.TypeACLSetPolicy, Policy: fsm.Policy{Name: "jobs", Locks: []fsm.LockRule{{Prefix: "jobs/", Access: fsm.AccessWrite}}}})
	h.apply(fsm.Command{Type: fsm.TypeACLCreateToken, ACLToken: fsm.ACLToken{AccessorID: "acc-1", SecretHash: fsm.HashSecret("s1"), Policies: []string{"jobs"}}})
	return h
}
