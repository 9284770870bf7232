//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// olderFeatures are the features the node standing in for the previous version lacks: the
// newest one, and attempt numbers, the one the Go client's Mutex uses once the cluster has
// it, so that the load would write entries the old node cannot apply were the gate open.
var olderFeatures = []fsm.Feature{fsm.FeatureTokenDeleteDropsWaits, fsm.FeatureAttemptNumbers, fsm.FeatureAttemptEnds}

// ledger is the load of the upgrade test: workers that take a shared lock in turn and, while
// holding it, take a lock of their own that they never give back. An acknowledged grant of one
// of those is a write the cluster must keep.
type ledger struct {
	mu     sync.Mutex
	kept   map[string]uint64 // lock name -> token, every acknowledged grant
	shared int               // grants of the shared locks
	lost   []error           // sessions that ended under the workers
}

func (l *ledger) run(t *testing.T, cl *client.Client, workers int) (stop func()) {
	t.Helper()
	failed := func(w int, err error) { l.fail(fmt.Errorf("worker %d: session: %w", w, err)) }
	return sessionWorkers(cl, workers, 20*time.Second, failed, func(ctx context.Context, w int, s *client.Session) {
		shared := client.NewMutex(s, fmt.Sprintf("upgrade/shared/%d", w%2))
		for k := 0; ctx.Err() == nil; k++ {
			if err := shared.Lock(ctx); err != nil {
				if s.Err() != nil {
					l.fail(fmt.Errorf("worker %d: session lost: %w", w, s.Err()))
					return
				}
				continue
			}
			name := fmt.Sprintf("upgrade/kept/%d/%d", w, k)
			own := client.NewMutex(s, name)
			if err := own.TryLock(ctx); err == nil {
				l.mu.Lock()
				l.kept[name] = own.Token()
				l.mu.Unlock()
			}
			l.mu.Lock()
			l.shared++
			l.mu.Unlock()
			_ = shared.Unlock(context.Background())
		}
		if s.Err() != nil {
			l.fail(fmt.Errorf("worker %d: session lost: %w", w, s.Err()))
		}
	})
}

func (l *ledger) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lost = append(l.lost, err)
}

func (l *ledger) grants() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shared
}

// clusterFeatures returns the features the cluster enabled, as node via's leader sees them.
func clusterFeatures(t *testing.T, cl *client.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := cl.Raw().Cluster(ctx)
	if err != nil {
		return nil
	}
	return r.Features
}

// nodeFeatures returns the features node ep supports, from its /v1/health.
func nodeFeatures(t *testing.T, ep string) []string {
	t.Helper()
	resp, err := http.Get(ep + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h api.Health
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h.Features
}

// A rolling upgrade of a cluster of agent processes under load: n3 runs as the previous
// version (--disable-features), then every node is restarted in turn, n3 last without the
// flag. While n3 lacks the features the cluster does not enable them, so no entry n3 cannot
// apply is ever written (its log would say "needs a newer raftlock" and it would stop); no
// acknowledged grant is lost; and the features turn on once the last node is upgraded, after
// which the Go client numbers its attempts.
func TestRollingUpgradeUnderLoad(t *testing.T) {
	ids := []string{"n1", "n2", "n3"}
	c := newProcCluster(t, ids...)
	initial := c.initial(ids...)
	var disabled []string
	for _, f := range olderFeatures {
		disabled = append(disabled, string(f))
	}
	old := []string{"--initial-cluster", initial, "--disable-features", strings.Join(disabled, ",")}
	c.start("n1", "--initial-cluster", initial)
	c.start("n2", "--initial-cluster", initial)
	c.start("n3", old...)
	c.waitCluster("n1", ids...)
	cl := c.client()
	if got := nodeFeatures(t, c.endpoints("n3")[0]); slices.Contains(got, string(fsm.FeatureAttemptNumbers)) {
		t.Fatalf("the old node supports %v", got)
	}
	testkit.Eventually(t, 30*time.Second, "the features every node supports to be enabled", func() bool {
		return slices.Contains(clusterFeatures(t, cl), string(fsm.FeatureExpiryTerm))
	})

	l := &ledger{kept: map[string]uint64{}}
	stop := l.run(t, cl, 4)
	defer stop()
	progress := func(what string) {
		n := l.grants()
		testkit.Eventually(t, 60*time.Second, what, func() bool { return l.grants() >= n+10 })
	}
	progress("the load to get going")
	for _, id := range ids {
		for _, f := range olderFeatures {
			if slices.Contains(clusterFeatures(t, cl), string(f)) {
				t.Fatalf("%s enabled while n3 lacks it", f)
			}
		}
		c.stop(id)
		c.start(id, "--initial-cluster", initial) // the new version: every feature
		c.waitCluster(id, ids...)
		progress("the load to go on after " + id + "'s upgrade")
	}
	testkit.Eventually(t, 30*time.Second, "the newest features to be enabled", func() bool {
		got := clusterFeatures(t, cl)
		for _, f := range olderFeatures {
			if !slices.Contains(got, string(f)) {
				return false
			}
		}
		return true
	})
	progress("the load to go on with every feature")
	// A new session learns the features at once: its attempts are numbered now.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := cl.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := client.NewMutex(s, "upgrade/after")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	// Every acknowledged grant of a kept lock is still there, with its token.
	l.mu.Lock()
	kept := maps.Clone(l.kept)
	l.mu.Unlock()
	held := map[string]uint64{}
	for _, lk := range lockTable(t, cl) {
		if lk.Held {
			held[lk.Name] = lk.Token
		}
	}
	for name, tok := range kept {
		if held[name] != tok {
			t.Errorf("acknowledged grant of %s (token %d) lost: now %d", name, tok, held[name])
		}
	}
	stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lost) > 0 {
		t.Fatalf("sessions lost during the upgrade: %v", l.lost)
	}
	if len(kept) < 20 {
		t.Fatalf("only %d acknowledged grants to check", len(kept))
	}
	t.Logf("%d shared grants, %d kept locks checked", l.shared, len(kept))
	c.checkLogs()
}
