package fsm

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
)

// appendTo appends the ACL records of the snapshot format: the bootstrapped flag, the policies
// sorted by name, the tokens sorted by accessor id.
func (s *aclSnapshot) appendTo(buf []byte) []byte {
	slices.SortFunc(s.policies, func(a, b *Policy) int { return cmp.Compare(a.Name, b.Name) })
	slices.SortFunc(s.tokens, func(a, b *ACLToken) int { return cmp.Compare(a.AccessorID, b.AccessorID) })
	var flag byte
	if s.bootstrapped {
		flag = 1
	}
	buf = append(buf, flag)
	buf = binary.AppendUvarint(buf, uint64(len(s.policies)))
	for _, p := range s.policies {
		buf = appendPolicy(buf, p)
		buf = binary.AppendUvarint(buf, p.CreateIndex)
		buf = binary.AppendUvarint(buf, p.ModifyIndex)
	}
	buf = binary.AppendUvarint(buf, uint64(len(s.tokens)))
	for _, t := range s.tokens {
		buf = appendString(buf, t.AccessorID)
		buf = append(buf, t.SecretHash[:]...)
		buf = appendString(buf, t.Description)
		buf = appendStrings(buf, t.Policies)
		buf = binary.AppendUvarint(buf, t.CreateIndex)
	}
	return buf
}

// readACL reads the ACL records into acl and checks that apply could have made them: sorted
// and unique, valid policies, tokens that name existing policies once each, secrets unique.
func readACL(d *decoder, acl *aclState) error {
	switch d.byte() {
	case 0:
	case 1:
		acl.bootstrapped = true
	default:
		d.fail(fmt.Errorf("%w: bad bootstrapped flag", ErrSnapshotCorrupt))
	}
	prev := ""
	for i, n := 0, d.count(); uint64(i) < n && d.err == nil; i++ {
		p := d.policy()
		p.CreateIndex, p.ModifyIndex = d.uvarint(), d.uvarint()
		if d.err != nil {
			break
		}
		if i > 0 && p.Name <= prev || !validPolicy(&p) || p.CreateIndex > p.ModifyIndex {
			return fmt.Errorf("%w: policy %q invalid or out of order", ErrSnapshotCorrupt, p.Name)
		}
		prev = p.Name
		acl.policies[p.Name] = &p
	}
	for i, n := 0, d.count(); uint64(i) < n && d.err == nil; i++ {
		t := ACLToken{AccessorID: d.string(), SecretHash: d.hash(), Description: d.string(), Policies: d.strings(), CreateIndex: d.uvarint()}
		if d.err != nil {
			break
		}
		if t.AccessorID == "" || i > 0 && t.AccessorID <= prev || acl.tokenPolicies(t.Policies) != StatusOK {
			return fmt.Errorf("%w: token %q invalid or out of order", ErrSnapshotCorrupt, t.AccessorID)
		}
		if _, dup := acl.bySecret[t.SecretHash]; dup {
			return fmt.Errorf("%w: token %q repeats a secret", ErrSnapshotCorrupt, t.AccessorID)
		}
		prev = t.AccessorID
		acl.putToken(&t)
	}
	return d.err
}
