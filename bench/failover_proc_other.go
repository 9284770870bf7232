//go:build !linux

package bench

import "context"

// procNodes would be the processes of a cluster on this machine; finding them needs Linux.
type procNodes struct{ failoverNodes }

func findProcNodes(context.Context, []string, bool) (*procNodes, string, error) {
	return nil, "it finds the leader's process through Linux's /proc; use --dev here", nil
}
