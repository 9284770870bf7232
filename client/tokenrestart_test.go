package client_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// A watch goes on through a node that restarted and has not replayed its log yet (it does not
// know the watcher's token then): the node does not refuse the token from that state, and the
// watch delivers the next change once the cluster is back.
func TestWatchSurvivesARestartedNodeUnderACL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dev, err := agent.StartDev(ctx, agent.DevOptions{ACL: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	li, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, dev.Endpoints(), client.WithToken(dev.ManagementToken()))
	tok, err := admin.Raw().CreateToken(ctx, api.CreateTokenRequest{Description: "watcher", Policies: []string{api.ManagementPolicy}})
	if err != nil {
		t.Fatal(err)
	}
	a := (li + 1) % 3
	testkit.Eventually(t, 10*time.Second, "every node knows the token", func() bool {
		for i := range 3 {
			if _, _, ok := dev.Agent(i).Node().ResolveToken(tok.SecretID); !ok {
				return false
			}
		}
		return true
	})
	watcher := newClient(t, []string{dev.Endpoints()[a]}, client.WithToken(tok.SecretID))
	events := watcher.WatchPrefix(ctx, "w/", client.Stale())
	if ev := <-events; !ev.Resync || ev.Err != nil {
		t.Fatalf("first event %+v", ev)
	}
	for _, i := range []int{(li + 2) % 3, li, a} {
		if err := dev.Kill(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Restart(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := dev.Agent(a).Node().ResolveToken(tok.SecretID); ok {
		t.Fatal("the restarted node knows the token from its snapshot: the test proved nothing")
	}
	// The watch asks the restarted node, alone, at least once.
	testkit.Eventually(t, 30*time.Second, "the watch asked the restarted node", func() bool {
		return watchAnswers(t, dev.Endpoints()[a]) > 0
	})
	for _, i := range []int{li, (li + 2) % 3} {
		if err := dev.Restart(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	s, err := admin.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Raw().Acquire(ctx, "w/job", api.AcquireRequest{Session: s.ID}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev, ok := <-events:
			if !ok || ev.Err != nil {
				t.Fatalf("the watch ended: %+v", ev)
			}
			if ev.Lock.Name == "w/job" && ev.Lock.Held || ev.Resync && len(ev.Locks) == 1 {
				return
			}
		case <-ctx.Done():
			t.Fatal("the watch delivered no event for the acquire")
		}
	}
}

// watchAnswers counts the answers ep gave to prefix watches (GET /v1/locks), from /metrics.
func watchAnswers(t *testing.T, ep string) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	res, err := hc.Get(ep + "/metrics")
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `raftlock_http_request_duration_seconds_count{`) && strings.Contains(line, `route="/v1/locks"`) {
			f := strings.Fields(line)
			v, _ := strconv.Atoi(f[len(f)-1])
			n += v
		}
	}
	return n
}
