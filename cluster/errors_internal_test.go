package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The refusals hashicorp/raft gives a configuration change before anything enters its log
// read as ErrMembershipRefused, not as an unknown outcome: the prefixes configChangeError
// knows are those of the raft version in use.
func TestRaftsConfigurationRefusalsAreDefinite(t *testing.T) {
	n := newSingleNode(t)
	self := n.raft.GetConfiguration()
	if err := self.Error(); err != nil {
		t.Fatal(err)
	}
	addr := self.Configuration().Servers[0].Address
	for name, change := range map[string]func() raft.Future{
		"the leader's address under another id": func() raft.Future { return n.raft.AddVoter("other", addr, 0, time.Second) },
		"the only voter removed":                func() raft.Future { return n.raft.RemoveServer("n1", 0, time.Second) },
		"a stale configuration index":           func() raft.Future { return n.raft.AddNonvoter("x", "127.0.0.1:9", 1<<40, time.Second) },
	} {
		err := change().Error()
		if err == nil {
			t.Fatalf("%s: raft accepted it", name)
		}
		if got := configChangeError(err); !errors.Is(got, ErrMembershipRefused) || errors.Is(got, ErrUnknownOutcome) {
			t.Fatalf("%s: %v classified as %v, want ErrMembershipRefused", name, err, got)
		}
	}
	if got := configChangeError(raft.ErrLeadershipLost); !errors.Is(got, ErrUnknownOutcome) {
		t.Fatalf("leadership lost classified as %v, want ErrUnknownOutcome", got)
	}
}
