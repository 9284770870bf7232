package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/devtest"
	"github.com/raftlock/raftlock/internal/testkit"
)

// These tests treat the server as a black box: they speak HTTP to a real in-process cluster and
// check what docs/api.md promises, code by code and field by field.

// deadline bounds every wait of the suite; the machine running it may be slow and busy.
const deadline = 10 * time.Second

// shared is one three-node cluster for the tests that do not hurt it, settled on first use.
var shared = devtest.Shared{Options: func() agent.DevOptions { return devOptions(nil) }, Settle: settle}

func TestMain(m *testing.M) {
	os.Exit(specMain(testkit.Main(m, shared.Close, aclShared.Close)))
}

// sharedCluster returns the shared cluster, started (and settled) on first use.
func sharedCluster(t *testing.T) *agent.Dev { return shared.Get(t) }

// ownCluster starts a cluster for one test that crashes nodes or needs its own limits.
func ownCluster(t *testing.T, tune func(*config.Config)) *agent.Dev {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, devOptions(tune))
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := settle(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// devOptions are the options of every test cluster; RAFTLOCK_TEST_LOG=debug (or another
// level) sends the nodes' logs to stderr. The Raft timeouts are twice the defaults: on a busy
// two-core machine running the race detector, the defaults let a stalled process lose its
// leader now and then, and a leader change answers writes in flight with 503 timeout and
// restarts session timers, which the tests here do not set out to exercise.
func devOptions(tune func(*config.Config)) agent.DevOptions {
	opts := agent.DevOptions{Tune: func(c *config.Config) {
		c.HeartbeatTimeout = time.Second
		c.ElectionTimeout = time.Second
		c.LeaderLeaseTimeout = 500 * time.Millisecond
		if tune != nil {
			tune(c)
		}
	}}
	if level := os.Getenv("RAFTLOCK_TEST_LOG"); level != "" {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.LevelFromString(level), Output: os.Stderr})
	}
	return opts
}

// settle waits until every running node agrees on one ready leader and every member has
// published its HTTP address, so that any node can forward at once.
func settle(d *agent.Dev) error { return settleWith(d, nil) }

// settleWith is settle for a cluster whose reads need the headers hdr (a token).
func settleWith(d *agent.Dev, hdr http.Header) error {
	return settleFeatures(d, hdr, len(fsm.AllFeatures()))
}

// settleFeatures is settleWith for a cluster that enables only features of its features
// (one with a member that lacks some).
func settleFeatures(d *agent.Dev, hdr http.Header, features int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*deadline)
	defer cancel()
	var last string
	for {
		if _, err := d.WaitLeader(ctx); err != nil {
			return fmt.Errorf("settle: %v (last: %s)", err, last)
		}
		if last = settled(d, hdr, features); last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("settle: %v (last: %s)", ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settled returns why the cluster is not settled yet, or "".
func settled(d *agent.Dev, hdr http.Header, features int) string {
	leader := ""
	for i := range d.Size() {
		if d.Agent(i) == nil {
			continue
		}
		r := rawDo(http.MethodGet, d.Endpoints()[i]+"/v1/cluster?consistency=stale", nil, hdr)
		if r.err != nil || r.status != http.StatusOK {
			return fmt.Sprintf("node %d: %v %d", i, r.err, r.status)
		}
		var c api.Cluster
		if err := json.Unmarshal(r.body, &c); err != nil {
			return err.Error()
		}
		if c.Leader == "" || leader != "" && c.Leader != leader {
			return fmt.Sprintf("node %d sees leader %q", i, c.Leader)
		}
		leader = c.Leader
		if len(c.Features) < features {
			return fmt.Sprintf("node %d has not applied the features' enabling yet: %v", i, c.Features)
		}
		for _, m := range c.Members {
			if m.HTTPAddr == "" {
				return fmt.Sprintf("node %d: member %s has no http_addr yet", i, m.ID)
			}
		}
		if r := rawDo(http.MethodGet, d.Endpoints()[i]+"/v1/ready", nil, nil); r.status != http.StatusOK {
			return fmt.Sprintf("node %d not ready", i)
		}
	}
	return ""
}

// roles returns the leader's endpoint and the followers' endpoints of the running nodes.
func roles(t *testing.T, d *agent.Dev) (leader string, followers []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	li, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, ep := range d.Endpoints() {
		if i != li && d.Agent(i) != nil {
			followers = append(followers, ep)
		}
	}
	return d.Endpoints()[li], followers
}
