package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Errors of command decoding.
var (
	ErrShortCommand   = errors.New("fsm: command truncated")
	ErrUnknownVersion = errors.New("fsm: unknown command version")
	ErrUnknownCommand = errors.New("fsm: unknown command type")
	// ErrNewerFormat wraps the decode errors of a command that a newer version may write: an
	// unknown version, type or flag. Apply stops the node on one rather than skip it.
	ErrNewerFormat     = errors.New("fsm: command in a newer format")
	ErrTrailingBytes   = errors.New("fsm: trailing bytes after command")
	ErrFieldTooLong    = errors.New("fsm: string field too long")
	ErrInvalidDuration = errors.New("fsm: negative duration")
	// ErrNonCanonical is returned for a field in a form Encode never writes (a varint with more
	// bytes than it needs, an empty attempt); refusing them keeps one encoding per command.
	ErrNonCanonical = errors.New("fsm: non-canonical varint")
	// ErrOutOfRange is returned for a number too large for its field.
	ErrOutOfRange = errors.New("fsm: number out of range")
)

// commandVersion is the first byte of every encoded command.
const commandVersion = 1

// maxStringField bounds every decoded string so that corrupt input cannot allocate much.
const maxStringField = 1 << 20

// CommandType is the second byte of every encoded command.
type CommandType uint8

// Command types.
const (
	TypeCreateSession CommandType = iota + 1
	TypeDestroySession
	TypeExpireSession
	TypeAcquire
	TypeRelease
	TypeCancelWait
	TypeDelayEnded
	TypeSetMember
	TypeRemoveMember
	TypeACLBootstrap
	TypeACLCreateToken
	TypeACLDeleteToken
	TypeACLSetPolicy
	TypeACLDeletePolicy
	TypeEnableFeatures
)

// TypeServeQueue grants the next waiter of a lock if its grant fits
// (FeatureSemaphoresRWLocks). A command grants a lock at most once, so that each grant has its
// own token; when a command frees a lock for several waiters (shared holds, a semaphore's
// permits), the leader proposes one ServeQueue for each further grant. Its value follows the
// wire types below.
const TypeServeQueue CommandType = 20

// TypeForceRelease ends, for an operator, the session that holds a lock under a token, as a
// destroy does, but leaves each lock the session held under a lock-delay of the session's TTL
// plus its lock-delay from the leader's clock reading Now (FeatureForceRelease): the holder's
// client, which learns it lost its session only at its next renewal or when its lease runs out,
// stops believing it holds the lock before anyone else is granted it. Its value follows
// TypeServeQueue's.
const TypeForceRelease CommandType = 21

// Wire types of commands whose newer forms an older version must refuse as ErrNewerFormat
// rather than misread: DecodeCommand maps each back to the type it encodes.
const (
	wireReleaseFlagged    = 16 // TypeRelease with a flags byte (attempts, numbered attempt, floor)
	wireCancelWaitFlagged = 17 // TypeCancelWait likewise
	wireExpireWithTerm    = 18 // TypeExpireSession with Term
	wireDelayEndedNamed   = 19 // TypeDelayEnded with DelayIndex
)

// Flags of an acquire, in its flags byte: the attempt flags (attemptFlag bits) sit at bits 2-4.
const (
	acquireFlagSetValue = 1 << 0
	acquireFlagQueue    = 1 << 1
	acquireAttemptShift = 2
	acquireFlagLimit    = 1 << 5 // Limit follows the attempt fields
	acquireFlagShared   = 1 << 6
)

// Flags of the attempt fields of the flagged wire forms.
const (
	attemptFlagString = 1 << iota // Attempt follows
	attemptFlagSeq                // AttemptSeq follows
	attemptFlagFloor              // AttemptFloor follows
)

// Command is one change to the state machine.
type Command struct {
	Type CommandType
	// Session is the session the command acts for (all but the member and delay commands).
	Session SessionID
	// Lock is the lock name (acquire, release, cancel-wait, delay-ended, serve-queue).
	Lock string
	// Name is the session's human name (create-session).
	Name string
	// TTL and LockDelay configure a new session (create-session).
	TTL       time.Duration
	LockDelay time.Duration
	// Value is the lock value to store on grant; SetValue says whether the request carried one.
	Value    string
	SetValue bool
	// Queue makes an acquire join the wait queue instead of failing when the lock is unavailable.
	Queue bool
	// Attempt names the client's try for the lock (acquire, cancel-wait, release): one Lock
	// call, all of whose requests carry it. A cancel-wait or release with an attempt refuses
	// later acquires with it, so a request of a finished try delayed in the network cannot
	// queue or grant the session again.
	Attempt string
	// AttemptSeq is a numbered attempt (acquire, cancel-wait, release; FeatureAttemptNumbers):
	// a session numbers its attempts from one counter, so that they grow with every Lock call
	// across all its locks. A cancel-wait or release with one fences every attempt of that
	// lock up to it; the session remembers the highest for each lock, never fewer.
	AttemptSeq uint64
	// AttemptFloor says that every attempt of the session numbered below it has ended
	// (FeatureAttemptNumbers): they are refused whatever lock they name, and what the session
	// remembers of them is forgotten.
	AttemptFloor uint64
	// Limit makes the acquired lock a semaphore that up to Limit sessions hold at once
	// (FeatureSemaphoresRWLocks; 2 to MaxLimit, and 0 or 1 for a lock). The first acquire
	// while the lock has holders, waiters or delays fixes it; one with another limit is
	// refused (StatusLimitMismatch).
	Limit uint32
	// Shared asks for a shared hold of a lock (FeatureSemaphoresRWLocks): shared holds
	// coexist, an exclusive one excludes every other. Not with a Limit above 1.
	Shared bool
	// DelayIndex names the lock-delay a DelayEnded ends by the index of the expiry that
	// started it (FeatureSemaphoresRWLocks); 0 ends every delay of the lock that is over by Now.
	DelayIndex uint64
	// Token is the fencing token a release presents.
	Token uint64
	// Now is the leader's clock, in Unix nanoseconds, when it proposed the command. Leaders
	// leave it 0 in acquires, so that only a DelayEnded, which a leader proposes after the full
	// delay on its monotonic clock, ends a lock-delay whatever the wall clocks say.
	Now int64
	// Member is the metadata of set-member; Member.ID alone for remove-member.
	Member Member
	// Owner is the accessor id of the token that creates a session (create-session); "" when
	// ACLs are off. Optional and last in the encoding, so entries written before it decode.
	Owner string
	// ACLToken is the token that acl-bootstrap (whose policies are always management alone)
	// and acl-create-token store; ACLToken.AccessorID alone for acl-delete-token. It carries
	// the secret's hash, never the secret: the proposer draws both ids.
	ACLToken ACLToken
	// Policy is the policy that acl-set-policy stores; Policy.Name alone for acl-delete-policy.
	Policy Policy
	// CreateOnly makes acl-set-policy refuse (StatusExists) a name that is in use.
	CreateOnly bool
	// Term is the leader term in which an expiry was decided (FeatureExpiryTerm): the expiry
	// applies only from a log entry of that term, so that a timer of a term the node lost
	// cannot end a session in a later term of the same node. 0 applies in any term.
	Term uint64
	// Features are the features that enable-features turns on, sorted.
	Features []Feature
}

// Encode appends the binary form of c to dst and returns it.
func (c *Command) Encode(dst []byte) []byte {
	dst = append(dst, commandVersion, byte(c.Type))
	switch c.Type {
	case TypeCreateSession:
		dst = append(dst, c.Session[:]...)
		dst = appendString(dst, c.Name)
		dst = binary.AppendUvarint(dst, uint64(c.TTL))
		dst = binary.AppendUvarint(dst, uint64(c.LockDelay))
		if c.Owner != "" { // optional and last: entries written before owners existed lack it
			dst = appendString(dst, c.Owner)
		}
	case TypeDestroySession:
		dst = append(dst, c.Session[:]...)
	case TypeExpireSession:
		if c.Term != 0 {
			dst[len(dst)-1] = wireExpireWithTerm
		}
		dst = append(dst, c.Session[:]...)
		dst = binary.AppendVarint(dst, c.Now)
		if c.Term != 0 {
			dst = binary.AppendUvarint(dst, c.Term)
		}
	case TypeAcquire:
		dst = append(dst, c.Session[:]...)
		dst = appendString(dst, c.Lock)
		flags := c.attemptFlags() << acquireAttemptShift
		if c.SetValue {
			flags |= acquireFlagSetValue
		}
		if c.Queue {
			flags |= acquireFlagQueue
		}
		if c.Limit != 0 {
			flags |= acquireFlagLimit
		}
		if c.Shared {
			flags |= acquireFlagShared
		}
		dst = append(dst, flags)
		if c.SetValue {
			dst = appendString(dst, c.Value)
		}
		dst = c.appendAttempts(dst)
		if c.Limit != 0 {
			dst = binary.AppendUvarint(dst, uint64(c.Limit))
		}
		dst = binary.AppendVarint(dst, c.Now)
	case TypeRelease:
		flagged := c.numbered()
		if flagged {
			dst[len(dst)-1] = wireReleaseFlagged
		}
		dst = append(dst, c.Session[:]...)
		dst = appendString(dst, c.Lock)
		dst = binary.AppendUvarint(dst, c.Token)
		dst = c.appendTrailingAttempts(dst, flagged)
	case TypeCancelWait:
		flagged := c.numbered()
		if flagged {
			dst[len(dst)-1] = wireCancelWaitFlagged
		}
		dst = append(dst, c.Session[:]...)
		dst = appendString(dst, c.Lock)
		dst = c.appendTrailingAttempts(dst, flagged)
	case TypeDelayEnded:
		if c.DelayIndex != 0 {
			dst[len(dst)-1] = wireDelayEndedNamed
		}
		dst = appendString(dst, c.Lock)
		dst = binary.AppendVarint(dst, c.Now)
		if c.DelayIndex != 0 {
			dst = binary.AppendUvarint(dst, c.DelayIndex)
		}
	case TypeSetMember:
		dst = appendString(dst, c.Member.ID)
		dst = appendString(dst, c.Member.RaftAddr)
		dst = appendString(dst, c.Member.HTTPAddr)
	case TypeRemoveMember:
		dst = appendString(dst, c.Member.ID)
	case TypeACLBootstrap:
		dst = appendString(dst, c.ACLToken.AccessorID)
		dst = append(dst, c.ACLToken.SecretHash[:]...)
		dst = appendString(dst, c.ACLToken.Description)
	case TypeACLCreateToken:
		dst = appendString(dst, c.ACLToken.AccessorID)
		dst = append(dst, c.ACLToken.SecretHash[:]...)
		dst = appendString(dst, c.ACLToken.Description)
		dst = appendStrings(dst, c.ACLToken.Policies)
	case TypeACLDeleteToken:
		dst = appendString(dst, c.ACLToken.AccessorID)
	case TypeACLSetPolicy:
		var flags byte
		if c.CreateOnly {
			flags |= 1
		}
		dst = append(dst, flags)
		dst = appendPolicy(dst, &c.Policy)
	case TypeACLDeletePolicy:
		dst = appendString(dst, c.Policy.Name)
	case TypeServeQueue:
		dst = appendString(dst, c.Lock)
	case TypeForceRelease:
		dst = append(dst, c.Session[:]...)
		dst = appendString(dst, c.Lock)
		dst = binary.AppendUvarint(dst, c.Token)
		dst = binary.AppendVarint(dst, c.Now)
	case TypeEnableFeatures:
		dst = binary.AppendUvarint(dst, uint64(len(c.Features)))
		for _, f := range c.Features {
			dst = appendString(dst, string(f))
		}
	}
	return dst
}

// numbered reports whether c carries a numbered attempt or a floor.
func (c *Command) numbered() bool { return c.AttemptSeq != 0 || c.AttemptFloor != 0 }

// attemptFlags returns the attemptFlag bits of the attempt fields c carries.
func (c *Command) attemptFlags() byte {
	var flags byte
	if c.Attempt != "" {
		flags |= attemptFlagString
	}
	if c.AttemptSeq != 0 {
		flags |= attemptFlagSeq
	}
	if c.AttemptFloor != 0 {
		flags |= attemptFlagFloor
	}
	return flags
}

// appendAttempts appends the attempt fields that attemptFlags announces.
func (c *Command) appendAttempts(dst []byte) []byte {
	if c.Attempt != "" {
		dst = appendString(dst, c.Attempt)
	}
	if c.AttemptSeq != 0 {
		dst = binary.AppendUvarint(dst, c.AttemptSeq)
	}
	if c.AttemptFloor != 0 {
		dst = binary.AppendUvarint(dst, c.AttemptFloor)
	}
	return dst
}

// appendTrailingAttempts appends the attempt fields that end a release or cancel-wait: in the
// flagged wire form a flags byte and the fields, in the older form the string attempt alone,
// optional and last (entries written before attempts existed lack it).
func (c *Command) appendTrailingAttempts(dst []byte, flagged bool) []byte {
	if flagged {
		return c.appendAttempts(append(dst, c.attemptFlags()))
	}
	if c.Attempt != "" {
		dst = appendString(dst, c.Attempt)
	}
	return dst
}

func appendStrings(dst []byte, ss []string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(ss)))
	for _, s := range ss {
		dst = appendString(dst, s)
	}
	return dst
}

// appendPolicy appends a policy's name, operator level and lock rules (not its indexes).
func appendPolicy(dst []byte, p *Policy) []byte {
	dst = appendString(dst, p.Name)
	dst = append(dst, byte(p.Operator))
	dst = binary.AppendUvarint(dst, uint64(len(p.Locks)))
	for _, r := range p.Locks {
		dst = appendString(dst, r.Prefix)
		dst = append(dst, byte(r.Access))
	}
	return dst
}

// DecodeCommand parses the binary form of a command. It returns an error, never panics, on
// malformed input.
func DecodeCommand(b []byte) (Command, error) {
	var c Command
	if len(b) < 2 {
		return c, ErrShortCommand
	}
	if b[0] != commandVersion {
		return c, fmt.Errorf("%w: %w %d", ErrNewerFormat, ErrUnknownVersion, b[0])
	}
	c.Type = CommandType(b[1])
	d := decoder{buf: b[2:]}
	switch b[1] {
	case wireReleaseFlagged:
		c.Type = TypeRelease
		c.Session, c.Lock, c.Token = d.sessionID(), d.string(), d.uvarint()
		d.flaggedAttempts(&c)
		return d.done(c)
	case wireCancelWaitFlagged:
		c.Type = TypeCancelWait
		c.Session, c.Lock = d.sessionID(), d.string()
		d.flaggedAttempts(&c)
		return d.done(c)
	case wireExpireWithTerm:
		c.Type = TypeExpireSession
		c.Session, c.Now, c.Term = d.sessionID(), d.varint(), d.uvarint()
		if c.Term == 0 && d.err == nil {
			d.fail(ErrNonCanonical) // the plain form carries no term
		}
		return d.done(c)
	case wireDelayEndedNamed:
		c.Type = TypeDelayEnded
		c.Lock, c.Now, c.DelayIndex = d.string(), d.varint(), d.nonZero()
		return d.done(c)
	}
	switch c.Type {
	case TypeCreateSession:
		c.Session = d.sessionID()
		c.Name = d.string()
		c.TTL = d.duration()
		c.LockDelay = d.duration()
		if len(d.buf) > 0 {
			c.Owner = d.nonEmpty()
		}
	case TypeDestroySession:
		c.Session = d.sessionID()
	case TypeExpireSession:
		c.Session = d.sessionID()
		c.Now = d.varint()
	case TypeAcquire:
		c.Session = d.sessionID()
		c.Lock = d.string()
		d.acquire(&c)
	case TypeRelease:
		c.Session = d.sessionID()
		c.Lock = d.string()
		c.Token = d.uvarint()
		if len(d.buf) > 0 {
			c.Attempt = d.attempt()
		}
	case TypeCancelWait:
		c.Session = d.sessionID()
		c.Lock = d.string()
		if len(d.buf) > 0 {
			c.Attempt = d.attempt()
		}
	case TypeDelayEnded:
		c.Lock = d.string()
		c.Now = d.varint()
	case TypeSetMember:
		c.Member.ID = d.string()
		c.Member.RaftAddr = d.string()
		c.Member.HTTPAddr = d.string()
	case TypeRemoveMember:
		c.Member.ID = d.string()
	case TypeACLBootstrap:
		c.ACLToken.AccessorID = d.string()
		c.ACLToken.SecretHash = d.hash()
		c.ACLToken.Description = d.string()
	case TypeACLCreateToken:
		c.ACLToken.AccessorID = d.string()
		c.ACLToken.SecretHash = d.hash()
		c.ACLToken.Description = d.string()
		c.ACLToken.Policies = d.strings()
	case TypeACLDeleteToken:
		c.ACLToken.AccessorID = d.string()
	case TypeACLSetPolicy:
		flags := d.byte()
		c.CreateOnly = flags&1 != 0
		if flags&^1 != 0 && d.err == nil {
			d.err = fmt.Errorf("%w: unknown set-policy flags %#x", ErrNewerFormat, flags)
		}
		c.Policy = d.policy()
	case TypeACLDeletePolicy:
		c.Policy.Name = d.string()
	case TypeServeQueue:
		c.Lock = d.string()
	case TypeForceRelease:
		c.Session, c.Lock, c.Token, c.Now = d.sessionID(), d.string(), d.uvarint(), d.varint()
	case TypeEnableFeatures:
		for n := d.count(); n > 0 && d.err == nil; n-- {
			f := Feature(d.string())
			if d.err == nil && !slices.Contains(AllFeatures(), f) {
				d.fail(fmt.Errorf("%w: unknown feature %q", ErrNewerFormat, f))
			}
			c.Features = append(c.Features, f)
		}
	default:
		return c, fmt.Errorf("%w: %w %d", ErrNewerFormat, ErrUnknownCommand, b[1])
	}
	return d.done(c)
}

// done returns c, or the decoder's error, or ErrTrailingBytes if bytes are left.
func (d *decoder) done(c Command) (Command, error) {
	if d.err != nil {
		return Command{}, d.err
	}
	if len(d.buf) != 0 {
		return Command{}, ErrTrailingBytes
	}
	return c, nil
}

// acquire reads an acquire's flags and the fields they announce, up to its clock reading. A
// flag this version does not know was written by a newer one.
func (d *decoder) acquire(c *Command) {
	flags := d.byte()
	if flags&^(acquireFlagSetValue|acquireFlagQueue|0x7<<acquireAttemptShift|acquireFlagLimit|acquireFlagShared) != 0 && d.err == nil {
		d.fail(fmt.Errorf("%w: unknown acquire flags %#x", ErrNewerFormat, flags))
		return
	}
	c.SetValue = flags&acquireFlagSetValue != 0
	c.Queue = flags&acquireFlagQueue != 0
	c.Shared = flags&acquireFlagShared != 0
	if c.SetValue {
		c.Value = d.string()
	}
	d.attempts(c, flags>>acquireAttemptShift&0x7)
	if flags&acquireFlagLimit != 0 {
		limit := d.nonZero()
		if limit > math.MaxUint32 && d.err == nil {
			d.fail(fmt.Errorf("%w: limit %d", ErrOutOfRange, limit))
		}
		c.Limit = uint32(limit)
	}
	c.Now = d.varint()
}

// attempts reads the attempt fields that flags (attemptFlag bits) announce. A flag this
// version does not know was written by a newer one; a numbered field is never written as 0.
func (d *decoder) attempts(c *Command, flags byte) {
	if flags&^(attemptFlagString|attemptFlagSeq|attemptFlagFloor) != 0 && d.err == nil {
		d.fail(fmt.Errorf("%w: unknown attempt flags %#x", ErrNewerFormat, flags))
		return
	}
	if flags&attemptFlagString != 0 {
		c.Attempt = d.attempt()
	}
	if flags&attemptFlagSeq != 0 {
		c.AttemptSeq = d.nonZero()
	}
	if flags&attemptFlagFloor != 0 {
		c.AttemptFloor = d.nonZero()
	}
}

// flaggedAttempts reads the flags byte and attempt fields of a flagged wire form, which is
// written only for a numbered attempt or a floor.
func (d *decoder) flaggedAttempts(c *Command) {
	d.attempts(c, d.byte())
	if !c.numbered() && d.err == nil {
		d.fail(ErrNonCanonical)
	}
}

// nonZero reads an optional number that is written only when it is not 0.
func (d *decoder) nonZero() uint64 {
	v := d.uvarint()
	if v == 0 && d.err == nil {
		d.fail(ErrNonCanonical)
	}
	return v
}

func appendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}
