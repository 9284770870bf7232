//go:build !linux

package bench

import (
	"context"
	"errors"
)

// RunState would build a large state on agent processes; it reads their memory and resets
// their peak through Linux's /proc.
func RunState(context.Context, StateOptions) (*StateReport, error) {
	return nil, errors.New("bench: the state workload needs Linux (it reads the agents' memory in /proc)")
}
