package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A node of a dev cluster that must stop for good (here its leader, as if a write to its Raft
// log had failed) stops alone: NodeStopped is told the node, the status an agent alone in its
// process exits with, and the cause; the node's API closes; the other two elect a leader; the
// process goes on. Before, the hook was the lone agent's os.Exit, and a test binary holding a
// dev cluster died with exit status 3 and no word of which node or why.
func TestDevNodeThatMustStopStopsAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stopped := make(chan string, 2)
	d, err := agent.StartDev(ctx, agent.DevOptions{NodeStopped: func(id string, status int, err error) {
		stopped <- fmt.Sprintf("%s %d %v", id, status, err)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	leader, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.Agent(leader).Halt(agent.ExitStorageFailure, syscall.EIO)
	select {
	case got := <-stopped:
		if want := fmt.Sprintf("%s %d %v", d.Config(leader).ID, agent.ExitStorageFailure, syscall.EIO); got != want {
			t.Fatalf("NodeStopped told %q, want %q", got, want)
		}
	case <-ctx.Done():
		t.Fatal("NodeStopped was not told")
	}
	testkit.Until(t, 30*time.Second, "the stopped node's API closed", func() error {
		resp, err := http.Get(d.Endpoints()[leader] + "/v1/health")
		if err != nil {
			return nil
		}
		resp.Body.Close()
		return fmt.Errorf("GET /v1/health: %s", resp.Status)
	})
	if d.Agent(leader).Node().IsLeader() {
		t.Fatal("the stopped node still leads")
	}
	testkit.Until(t, 30*time.Second, "another leader", func() error {
		for i := range d.Size() {
			if i != leader && d.Agent(i).Node().IsLeader() {
				resp, err := http.Get(d.Endpoints()[i] + "/v1/ready")
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("GET /v1/ready on the new leader: %s", resp.Status)
				}
				return nil
			}
		}
		return fmt.Errorf("no leader among the other two")
	})
	if err := d.Kill(leader); err != nil {
		t.Fatalf("Kill of the stopped node, before a restart: %v", err)
	}
	if err := d.Restart(ctx, leader); err != nil {
		t.Fatalf("the stopped node does not start again: %v", err)
	}
}
