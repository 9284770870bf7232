package fsm

import (
	"encoding/binary"
	"fmt"
	"time"
)

// decoder reads fields from a buffer and remembers the first error, so that a decode function
// reads like the matching encode function.
type decoder struct {
	buf []byte
	err error
}

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.buf = nil
}

func (d *decoder) byte() byte {
	if len(d.buf) < 1 {
		d.fail(ErrShortCommand)
		return 0
	}
	v := d.buf[0]
	d.buf = d.buf[1:]
	return v
}

func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.buf)
	if !d.varintOK(n) {
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// varint reads a zig-zag encoded signed varint, as binary.Varint does: the checks of its
// unsigned form are the same.
func (d *decoder) varint() int64 {
	ux := d.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// varintOK checks the length n that binary.Uvarint or binary.Varint reported: a varint must be
// complete, fit 64 bits, and be minimal (its last byte is non-zero unless it is the only one).
func (d *decoder) varintOK(n int) bool {
	switch {
	case n <= 0:
		d.fail(ErrShortCommand)
		return false
	case n > 1 && d.buf[n-1] == 0:
		d.fail(ErrNonCanonical)
		return false
	}
	return true
}

func (d *decoder) duration() time.Duration {
	v := d.uvarint()
	if v > 1<<63-1 {
		d.fail(ErrInvalidDuration)
		return 0
	}
	return time.Duration(v)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > maxStringField {
		d.fail(ErrFieldTooLong)
		return ""
	}
	if uint64(len(d.buf)) < n {
		d.fail(ErrShortCommand)
		return ""
	}
	s := string(d.buf[:n])
	d.buf = d.buf[n:]
	return s
}

// attempt reads an attempt, which is never empty when written: an empty one would be a second
// encoding of "no attempt".
func (d *decoder) attempt() string { return d.nonEmpty() }

// nonEmpty reads an optional string field that is written only when it is not empty.
func (d *decoder) nonEmpty() string {
	s := d.string()
	if s == "" {
		d.fail(ErrNonCanonical)
	}
	return s
}

// strings reads a counted list of strings; an empty list is nil.
func (d *decoder) strings() []string {
	var out []string
	for n := d.count(); n > 0 && d.err == nil; n-- {
		out = append(out, d.string())
	}
	return out
}

// fixed fills dst with the next len(dst) bytes, or fails and leaves it zero.
func (d *decoder) fixed(dst []byte) {
	if len(d.buf) < len(dst) {
		d.fail(ErrShortCommand)
		return
	}
	copy(dst, d.buf)
	d.buf = d.buf[len(dst):]
}

func (d *decoder) hash() [32]byte {
	var h [32]byte
	d.fixed(h[:])
	return h
}

// access reads an access level; one this version does not know was written by a newer one.
func (d *decoder) access() Access {
	a := Access(d.byte())
	if a > AccessWrite && d.err == nil {
		d.fail(fmt.Errorf("%w: unknown access level %d", ErrNewerFormat, a))
	}
	return a
}

// policy reads what appendPolicy wrote.
func (d *decoder) policy() Policy {
	p := Policy{Name: d.string(), Operator: d.access()}
	for n := d.count(); n > 0 && d.err == nil; n-- {
		p.Locks = append(p.Locks, LockRule{Prefix: d.string(), Access: d.access()})
	}
	return p
}

func (d *decoder) sessionID() SessionID {
	var id SessionID
	d.fixed(id[:])
	return id
}
