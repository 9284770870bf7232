package cluster

import (
	"context"

	"github.com/hashicorp/raft"
)

// ReadIndexFor exposes readIndexFor to the package's external tests: a question as a member
// naming asker in askerTerm would send it.
func (n *Node) ReadIndexFor(ctx context.Context, asker raft.Server, askerTerm uint64) (uint64, error) {
	return n.readIndexFor(ctx, asker, askerTerm)
}

// ProposalsOpen reports whether the node takes proposals now (no restore holds them back).
func (n *Node) ProposalsOpen() bool {
	if !n.proposals.TryRLock() {
		return false
	}
	n.proposals.RUnlock()
	return true
}
