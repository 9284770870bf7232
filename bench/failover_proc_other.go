//go:build !linux

package bench

import (
	"context"

	"github.com/raftlock/raftlock/client"
)

// procNodes would be the processes of a cluster on this machine; finding them needs Linux.
type procNodes struct{ failoverNodes }

func findProcNodes(context.Context, []string, bool, ...client.Option) (*procNodes, string, error) {
	return nil, "it finds the leader's process through Linux's /proc; use --dev here", nil
}
