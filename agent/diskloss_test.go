package agent_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A member whose data directory was lost (a wiped disk, a new volume) and that is started
// again with its usual command is refused, with --initial-cluster and with --join alike: it
// forgot its log and its votes, and under its old id its empty log could make a majority with
// a lagging member. Before, --initial-cluster bootstrapped a new cluster and served as a ready
// voter, and --join was a no-op add followed by a promotion. The refusal leaves the data
// directory without Raft state, so a supervisor's restart is refused again; and the
// documented way back — members remove, then --join with an empty data directory — works.
func TestLostDataDirIsRefusedUntilRemovedAndJoined(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	leader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lost := (leader + 1) % dev.Size()
	id := dev.Config(lost).ID
	if err := dev.Kill(lost); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dev.Config(lost).DataDir); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: started, want refused", what)
		}
		if !errors.Is(err, cluster.ErrAlreadyBootstrapped) || !agent.Refused(err) {
			t.Fatalf("%s: %v, want ErrAlreadyBootstrapped", what, err)
		}
	}
	// Its usual command, twice: a supervisor restarts it.
	for range 2 {
		refused("restart with --initial-cluster on an empty data dir", dev.Restart(ctx, lost))
	}
	join := dev.Config(lost)
	join.InitialCluster = nil
	join.Join = []string{dev.Agent(leader).Endpoint()}
	a, err := agent.Start(ctx, join, nil, agent.Listeners{})
	if err == nil {
		a.Kill()
	}
	refused("restart with --join on an empty data dir", err)

	// The way back: remove it, then join as a new member.
	if err := dev.Agent(leader).Node().RemoveMember(ctx, id); err != nil {
		t.Fatal(err)
	}
	a, err = agent.Start(ctx, join, nil, agent.Listeners{})
	if err != nil {
		t.Fatalf("join after members remove: %v", err)
	}
	defer a.Kill()
	testkit.Eventually(t, 30*time.Second, id+" to be a voter again", func() bool {
		m, ok := members(t, dev.Endpoints()[leader])[id]
		return ok && m.Suffrage == "voter" && m.HTTPAddr == a.HTTPAddr()
	})
}
