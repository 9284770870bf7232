package cluster_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// backupWithEveryFeature returns a backup of a one-node cluster that enabled every feature.
func backupWithEveryFeature(t *testing.T) []byte {
	t.Helper()
	src := newTestCluster(t, 1, nil)
	_, n := src.waitLeader()
	testkit.Eventually(t, leaderTimeout, "every feature enabled", func() bool {
		return len(n.FSM().Features()) == len(fsm.AllFeatures())
	})
	createSession(t, n, "a", longTTL, 0)
	file := saveBackup(t, n)
	if sum, err := backup.Inspect(bytes.NewReader(file)); err != nil || len(sum.State.Features) != len(fsm.AllFeatures()) {
		t.Fatalf("backup: %+v, %v", sum.State, err)
	}
	return file
}

// A restore into a brand-new cluster, sent as soon as it has a leader (before its leader
// enabled the features every member supports), waits for the features instead of being
// refused "not every member supports it": every member runs the same build. (Before, it was
// refused whenever a member had not published its address or answered yet.)
func TestRestoreIntoANewClusterAtOnceWaitsForItsFeatures(t *testing.T) {
	file := backupWithEveryFeature(t)
	dst := newTestCluster(t, 3, nil)
	var res cluster.RestoreResult
	testkit.Eventually(t, leaderTimeout, "the restore at the first leader", func() bool {
		n := dst.currentLeader()
		if n == nil {
			return false
		}
		var err error
		res, err = n.RestoreBackup(opContext(t), bytes.NewReader(file), cluster.RestoreOptions{})
		if errors.Is(err, cluster.ErrNotLeader) {
			return false // not past its barrier yet, or deposed: nothing was changed
		}
		if err != nil {
			t.Fatalf("restore into the new cluster at once: %v", err)
		}
		return true
	})
	if res.Index <= res.Header.Index {
		t.Fatalf("restored %+v", res)
	}
}

// A request that needs a feature a member lacks is refused at once, and the refusal names
// the member and says that it lacks it, not that the feature is merely not enabled yet.
func TestFeatureRefusalNamesTheMemberThatLacksIt(t *testing.T) {
	file := backupWithEveryFeature(t)
	c := newTestCluster(t, 3, func(cfg *cluster.Config) {
		if cfg.ID == "n3" {
			cfg.Features = slices.DeleteFunc(fsm.AllFeatures(), func(f fsm.Feature) bool { return f == fsm.FeatureAttemptNumbers })
		}
	})
	_, leader := c.waitLeader()
	c.waitPublished(leader)
	testkit.Eventually(t, leaderTimeout, "the shared features enabled", func() bool {
		n := c.currentLeader()
		return n != nil && n.FeatureEnabled(fsm.FeatureExpiryTerm)
	})
	c.atLeader("a restore of a backup using a feature n3 lacks", func(n *cluster.Node) error {
		_, err := n.RestoreBackup(opContext(t), bytes.NewReader(file), cluster.RestoreOptions{})
		if errors.Is(err, cluster.ErrNotLeader) {
			return err
		}
		if !errors.Is(err, cluster.ErrFeatureNotEnabled) {
			t.Fatalf("restore: %v, want ErrFeatureNotEnabled", err)
		}
		for _, want := range []string{"n3", "does not support", string(fsm.FeatureAttemptNumbers), "lacks it"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("restore refused with %q, which does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "not enabled yet") {
			t.Fatalf("restore refused with %q: it is not a matter of time", err)
		}
		return nil
	})
}
