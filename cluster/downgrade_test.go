package cluster_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// downgradeCluster is a three-node cluster whose n3 can be restarted as "the previous build":
// a node that lacks every feature (fsm.WithFeatures), as a version from before them. Its
// refusals (Config.OnRefusal) arrive on refused.
type downgradeCluster struct {
	*testCluster
	mu      sync.Mutex
	older   bool
	refused chan error
}

func newDowngradeCluster(t *testing.T) *downgradeCluster {
	d := &downgradeCluster{refused: make(chan error, 4)}
	d.testCluster = newTestCluster(t, 3, func(cfg *cluster.Config) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if cfg.ID == "n3" && d.older {
			cfg.Features = []fsm.Feature{}
			cfg.OnRefusal = func(err error) { d.refused <- err }
		}
	})
	_, leader := d.waitLeader()
	d.waitPublished(leader)
	testkit.Eventually(t, leaderTimeout, "every feature enabled on n3", func() bool {
		n := d.node(2)
		return n != nil && len(n.FSM().Features()) == len(fsm.AllFeatures())
	})
	return d
}

// downgrade stops n3 — at once (a SIGKILL) when crash is set, else gracefully (a SIGTERM,
// which snapshots) — and returns its config as the previous build's, on its old Raft address.
func (d *downgradeCluster) downgrade(crash bool) cluster.Config {
	if crash {
		d.kill(2)
	} else {
		d.stop(2)
	}
	d.mu.Lock()
	d.older = true
	d.mu.Unlock()
	return d.config(2, d.listen(2))
}

// After a graceful stop, the previous build meets the shutdown snapshot, which names features
// it lacks, and refuses to start with ErrNeedsNewerVersion.
func TestDowngradeAfterAGracefulStopRefusesAtTheSnapshot(t *testing.T) {
	d := newDowngradeCluster(t)
	cfg := d.downgrade(false)
	n, err := cluster.New(cfg)
	if err == nil {
		n.Close()
		t.Fatal("the previous build started on data with features it lacks")
	}
	cfg.RaftListener.Close()
	if !errors.Is(err, cluster.ErrNeedsNewerVersion) || !errors.Is(err, fsm.ErrNewerFormat) {
		t.Fatalf("start of the previous build: %v, want ErrNeedsNewerVersion", err)
	}
	d.waitLeader()
}

// After a crash (no shutdown snapshot), the previous build stops at the first log entry it
// cannot apply with the same refusal, through OnRefusal, instead of panicking (in a loop,
// under a supervisor, as it did); it applies nothing after that entry.
func TestDowngradeAfterACrashStopsCleanlyAtAnEntryItCannotApply(t *testing.T) {
	d := newDowngradeCluster(t)
	cfg := d.downgrade(true)
	n, err := cluster.New(cfg)
	if err != nil {
		cfg.RaftListener.Close()
		if errors.Is(err, cluster.ErrNeedsNewerVersion) {
			t.Skipf("n3 had a snapshot of its own with the features (%v): the crash path is not reached", err)
		}
		t.Fatalf("start of the previous build after a crash: %v", err)
	}
	defer n.Close()
	select {
	case err = <-d.refused:
	case <-time.After(leaderTimeout):
		t.Fatal("the previous build did not stop at the entry it cannot apply")
	}
	if !errors.Is(err, cluster.ErrNeedsNewerVersion) || !errors.Is(err, fsm.ErrNewerFormat) || !strings.Contains(err.Error(), "needs a newer raftlock") {
		t.Fatalf("refusal %v, want ErrNeedsNewerVersion naming the entry", err)
	}
	if n.FSM().Halted() == nil {
		t.Fatal("the state machine went on after the entry")
	}
	n.Close() // as the agent exits
	d.waitLeader()
}
