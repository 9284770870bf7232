package cluster_test

import (
	"errors"
	"os"
	"path/filepath"
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
	d.startPrevious(t, d.downgrade(false))
}

// A node killed after the cluster enabled its features (no shutdown snapshot: a SIGKILL), its
// data directory kept as it was, and started again as the previous build refuses with
// ErrNeedsNewerVersion before it applies anything, as after a graceful stop: the snapshot each
// node takes as soon as it applied the entry that enabled a feature is the first thing the
// older build reads. That is the path of the build already shipped, which panicked, in a loop
// under a supervisor, on the first log entry it did not know when no snapshot came first.
func TestDowngradeAfterACrashRefusesAtTheSnapshot(t *testing.T) {
	d := newDowngradeCluster(t)
	testkit.Eventually(t, leaderTimeout, "n3's snapshot after the features were enabled", func() bool {
		n := d.node(2)
		return n != nil && raftStat(t, n, "last_snapshot_index") > 0
	})
	d.startPrevious(t, d.downgrade(true))
}

// startPrevious starts n3 as the previous build on cfg and checks that it refuses at once with
// ErrNeedsNewerVersion, and that the others go on.
func (d *downgradeCluster) startPrevious(t *testing.T, cfg cluster.Config) {
	t.Helper()
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

// Where no snapshot holds the features (the node crashed before it took the one that follows
// their enabling: its snapshots are removed here to get there every time), the previous build
// — if it is this one or later — stops at the first log entry it cannot apply with the same
// refusal, through OnRefusal, instead of panicking (in a loop, under a supervisor, as the
// build already shipped does); it applies nothing after that entry.
func TestDowngradeAfterACrashStopsCleanlyAtAnEntryItCannotApply(t *testing.T) {
	d := newDowngradeCluster(t)
	cfg := d.downgrade(true)
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	n, err := cluster.New(cfg)
	if err != nil {
		cfg.RaftListener.Close()
		t.Fatalf("start of the previous build without a snapshot: %v", err)
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
