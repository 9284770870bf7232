package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/internal/testkit"
)

// members reads GET /v1/cluster from endpoint.
func members(t *testing.T, endpoint string) map[string]api.Member {
	t.Helper()
	resp, err := http.Get(endpoint + "/v1/cluster")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c api.Cluster
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]api.Member)
	for _, m := range c.Members {
		out[m.ID] = m
	}
	return out
}

func TestJoinThenLeaveOnShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()

	cfg := config.Default()
	cfg.ID = "n4"
	cfg.DataDir = filepath.Join(t.TempDir(), "n4")
	cfg.HTTPAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Join = []string{dev.Endpoints()[1]} // a follower or the leader: either forwards
	cfg.LeaveOnShutdown = true
	n4, err := agent.Start(ctx, cfg, nil, agent.Listeners{})
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	testkit.Eventually(t, 15*time.Second, "n4 to be a voter with its HTTP address", func() bool {
		m, ok := members(t, dev.Endpoints()[0])["n4"]
		return ok && m.Suffrage == "voter" && m.HTTPAddr == n4.HTTPAddr()
	})
	// The new member serves a linearizable read, forwarded to the leader.
	resp, err := http.Get(n4.Endpoint() + "/v1/locks/some/lock")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get(api.HeaderLeader) == "" {
		t.Fatalf("read through the joined node: %d, leader header %q", resp.StatusCode, resp.Header.Get(api.HeaderLeader))
	}

	if err := n4.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with leave: %v", err)
	}
	testkit.Eventually(t, 15*time.Second, "n4 to leave the configuration", func() bool {
		_, ok := members(t, dev.Endpoints()[0])["n4"]
		return !ok
	})
}

func TestStartRefusesABusyAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	cfg := config.Default()
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr = dev.Agent(0).HTTPAddr()
	cfg.RaftAddr = "127.0.0.1:0"
	if a, err := agent.Start(ctx, cfg, nil, agent.Listeners{}); err == nil {
		a.Kill()
		t.Fatal("Start on an address in use succeeded")
	}
}
