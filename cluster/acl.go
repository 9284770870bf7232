package cluster

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/raftlock/raftlock/fsm"
)

// NewACLToken is a token just created, with the one copy of its secret that will ever exist:
// the state keeps only the secret's hash.
type NewACLToken struct {
	fsm.ACLToken
	SecretID string
}

// BootstrapDescription describes the token that ACLBootstrap creates.
const BootstrapDescription = "Bootstrap Token (Global Management)"

// ACLBootstrap creates the cluster's first token, with the management policy. It works once
// per cluster: later calls fail with ErrACLBootstrapped.
func (n *Node) ACLBootstrap(ctx context.Context) (NewACLToken, error) {
	return n.newACLToken(ctx, fsm.TypeACLBootstrap, BootstrapDescription, nil)
}

// CreateACLToken creates a token with the named policies (ErrPolicyNotFound if one is missing).
func (n *Node) CreateACLToken(ctx context.Context, description string, policies []string) (NewACLToken, error) {
	return n.newACLToken(ctx, fsm.TypeACLCreateToken, description, policies)
}

// newACLToken draws the new token's accessor id and secret here, on the leader, from
// crypto/rand, and proposes the accessor id with the secret's hash: the log never sees the
// secret, and the state machine draws nothing.
func (n *Node) newACLToken(ctx context.Context, typ fsm.CommandType, description string, policies []string) (NewACLToken, error) {
	if err := n.leaderOnly(); err != nil {
		return NewACLToken{}, err
	}
	for {
		accessor, err := newUUID()
		if err != nil {
			return NewACLToken{}, err
		}
		secret, err := newUUID()
		if err != nil {
			return NewACLToken{}, err
		}
		t := fsm.ACLToken{AccessorID: accessor, SecretHash: fsm.HashSecret(secret), Description: description, Policies: policies}
		res, err := n.propose(ctx, &fsm.Command{Type: typ, ACLToken: t})
		if err != nil {
			return NewACLToken{}, err
		}
		switch res.Status {
		case fsm.StatusOK:
			if typ == fsm.TypeACLBootstrap {
				t.Policies = []string{fsm.ManagementPolicy}
			}
			t.CreateIndex = res.Index
			return NewACLToken{ACLToken: t, SecretID: secret}, nil
		case fsm.StatusExists:
			continue // a 122-bit collision: draw again
		}
		return NewACLToken{}, aclStatusError(res.Status)
	}
}

// DeleteACLToken deletes the token with the accessor id. Its sessions stay, until they expire
// or a management token ends them.
func (n *Node) DeleteACLToken(ctx context.Context, accessor string) error {
	return n.proposeACL(ctx, &fsm.Command{Type: fsm.TypeACLDeleteToken, ACLToken: fsm.ACLToken{AccessorID: accessor}}, ErrTokenNotFound)
}

// SetACLPolicy stores p (its indexes are ignored), replacing a policy of that name unless
// createOnly (ErrPolicyExists), and returns it as stored.
func (n *Node) SetACLPolicy(ctx context.Context, p fsm.Policy, createOnly bool) (fsm.Policy, error) {
	if err := n.leaderOnly(); err != nil {
		return fsm.Policy{}, err
	}
	res, err := n.propose(ctx, &fsm.Command{Type: fsm.TypeACLSetPolicy, Policy: p, CreateOnly: createOnly})
	if err != nil {
		return fsm.Policy{}, err
	}
	if res.Status != fsm.StatusOK {
		return fsm.Policy{}, aclStatusError(res.Status)
	}
	if stored, ok := n.fsm.Policy(p.Name); ok && stored.ModifyIndex == res.Index {
		return stored, nil
	}
	// Changed again (or deleted) since: report it as this command stored it.
	p.CreateIndex, p.ModifyIndex = res.Index, res.Index
	return p, nil
}

// DeleteACLPolicy deletes the named policy and takes it out of every token.
func (n *Node) DeleteACLPolicy(ctx context.Context, name string) error {
	return n.proposeACL(ctx, &fsm.Command{Type: fsm.TypeACLDeletePolicy, Policy: fsm.Policy{Name: name}}, ErrPolicyNotFound)
}

// proposeACL proposes a delete; notFound is its error when there is nothing to delete.
func (n *Node) proposeACL(ctx context.Context, c *fsm.Command, notFound error) error {
	if err := n.leaderOnly(); err != nil {
		return err
	}
	res, err := n.propose(ctx, c)
	if err != nil {
		return err
	}
	switch res.Status {
	case fsm.StatusOK:
		return nil
	case fsm.StatusNotFound:
		return notFound
	}
	return aclStatusError(res.Status)
}

// ResolveToken returns the token whose secret is secret, with what its policies allow, from
// this node's state (which, on a follower, may lag the leader's).
func (n *Node) ResolveToken(secret string) (fsm.ACLToken, fsm.Authorizer, bool) {
	return n.fsm.ResolveSecret(fsm.HashSecret(secret))
}

// aclStatusError maps the state machine's refusal of an ACL command to this package's errors.
func aclStatusError(st fsm.Status) error {
	switch st {
	case fsm.StatusAlreadyBootstrapped:
		return ErrACLBootstrapped
	case fsm.StatusPolicyNotFound:
		return ErrPolicyNotFound
	case fsm.StatusExists:
		return ErrPolicyExists
	case fsm.StatusBuiltinPolicy:
		return ErrBuiltinPolicy
	case fsm.StatusLastManagement:
		return ErrLastManagementToken
	case fsm.StatusInvalid:
		return ErrInvalidACL
	}
	return fmt.Errorf("cluster: ACL command answered status %v", st)
}

// newUUID returns a random (version 4) UUID drawn from crypto/rand.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cluster: random id: %w", err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:]), nil
}
