package cluster

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"
)

// Errors of the Node API.
var (
	// ErrNotLeader means this node cannot execute the request because it is not the ready
	// leader; nothing was applied.
	ErrNotLeader = errors.New("cluster: not the leader")
	// ErrNoLeader means no leader is known right now; nothing was applied.
	ErrNoLeader = errors.New("cluster: no leader")
	// ErrUnknownOutcome means a command was submitted but it is not known whether it committed.
	ErrUnknownOutcome = errors.New("cluster: outcome unknown")
	// ErrSessionNotFound means the session does not exist or has expired.
	ErrSessionNotFound = errors.New("cluster: session not found")
	// ErrUnknownMember means no member has the given id.
	ErrUnknownMember = errors.New("cluster: unknown member")
	// ErrMemberConflict refuses to add a member whose id is a member's at other addresses, or
	// whose Raft address is another member's; nothing was changed.
	ErrMemberConflict = errors.New("cluster: member conflict")
	// ErrMembershipRefused means Raft refused a membership change as it stands (it would
	// leave the cluster without a voter, say, or hand leadership to a member that cannot
	// lead); nothing was changed, and asking again changes nothing.
	ErrMembershipRefused = errors.New("cluster: membership change refused")
	// ErrNotProposed means the request ended (its context) before its command was proposed;
	// nothing was applied.
	ErrNotProposed = errors.New("cluster: not proposed")
	// ErrShutdown means the node is shutting down.
	ErrShutdown = errors.New("cluster: node is shut down")

	// ErrACLBootstrapped means the cluster's ACLs were bootstrapped already; it is done once.
	ErrACLBootstrapped = errors.New("cluster: ACLs already bootstrapped")
	// ErrTokenNotFound means no token has the accessor id.
	ErrTokenNotFound = errors.New("cluster: ACL token not found")
	// ErrPolicyNotFound means a policy named does not exist.
	ErrPolicyNotFound = errors.New("cluster: ACL policy not found")
	// ErrPolicyExists means a policy to create has a name that is in use.
	ErrPolicyExists = errors.New("cluster: ACL policy exists")
	// ErrBuiltinPolicy means a change to the built-in management policy, which cannot change.
	ErrBuiltinPolicy = errors.New("cluster: the management policy is built in and cannot be changed or deleted")
	// ErrLastManagementToken means a delete of the only token with the management policy.
	ErrLastManagementToken = errors.New("cluster: the last token with the management policy cannot be deleted")
	// ErrInvalidACL means the state machine refused an ACL command's content (an empty name, a
	// repeated prefix or policy).
	ErrInvalidACL = errors.New("cluster: invalid ACL command")
)

// errTermChanged means the node left the term a request was admitted in before its
// leadership confirmation succeeded.
var errTermChanged = errors.New("cluster: the leader term changed while the request waited for its confirmation")

// errNotConfirmed means rounds of heartbeats kept failing to show a majority that accepted
// this leader's term after a request arrived.
var errNotConfirmed = errors.New("cluster: leadership not confirmed by messages sent after the request arrived")

// applyError classifies a raft error: definite refusals become ErrNotLeader, everything after
// the command may have entered the log becomes ErrUnknownOutcome.
func applyError(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, ErrShutdown)
	default:
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
}

// verifyError classifies the error of a leadership confirmation; nothing is applied by one.
func verifyError(err error) error {
	if errors.Is(err, raft.ErrRaftShutdown) {
		return fmt.Errorf("%w: %w", ErrNotLeader, ErrShutdown)
	}
	return fmt.Errorf("%w: %w", ErrNotLeader, err)
}

// raftConfigRefusals are the beginnings of the errors with which hashicorp/raft refuses a
// configuration change before anything enters the log (nextConfiguration and
// checkConfiguration in its configuration.go): definite refusals, not unknown outcomes.
var raftConfigRefusals = []string{
	"need at least one voter in configuration",
	"found duplicate ID in configuration",
	"found duplicate address in configuration",
	"empty ID in configuration",
	"empty address in configuration",
	"configuration changed since",
}

// configChangeError classifies the error of a membership change: a refusal of the change
// itself becomes ErrMembershipRefused, anything else as applyError.
func configChangeError(err error) error {
	for _, p := range raftConfigRefusals {
		if strings.HasPrefix(err.Error(), p) {
			return fmt.Errorf("%w: %w", ErrMembershipRefused, err)
		}
	}
	return applyError(err)
}
