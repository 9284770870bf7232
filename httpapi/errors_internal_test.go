package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/cluster"
)

func TestUnknownOutcomeIsNeverReportedAsNothingApplied(t *testing.T) {
	cases := []struct {
		err  error
		code string
	}{
		{fmt.Errorf("%w: %w", cluster.ErrUnknownOutcome, cluster.ErrNotLeader), api.CodeTimeout},
		{fmt.Errorf("%w: %v", cluster.ErrUnknownOutcome, cluster.ErrNotLeader), api.CodeTimeout},
		{fmt.Errorf("%w: %w", cluster.ErrUnknownOutcome, context.Canceled), api.CodeTimeout},
		{context.DeadlineExceeded, api.CodeTimeout},
		{fmt.Errorf("%w: %w", cluster.ErrNotProposed, context.Canceled), api.CodeTimeout},
		{fmt.Errorf("%w: x", cluster.ErrNotLeader), api.CodeNoLeader},
		{cluster.ErrSessionNotFound, api.CodeSessionNotFound},
		{fmt.Errorf("%w %q", cluster.ErrUnknownMember, "n9"), api.CodeNotFound},
	}
	for _, tc := range cases {
		e := fromClusterError(tc.err)
		if e.body.Error.Code != tc.code {
			t.Errorf("%v: code %q, want %q", tc.err, e.body.Error.Code, tc.code)
		}
		if tc.code == api.CodeTimeout || tc.code == api.CodeNoLeader {
			if e.status != http.StatusServiceUnavailable || e.retryAfter == "" {
				t.Errorf("%v: status %d retry-after %q, want 503 with Retry-After", tc.err, e.status, e.retryAfter)
			}
		}
	}
}
