package client_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/internal/testkit"
)

// streamsOpen reads raftlock_watch_streams from ep's /metrics.
func streamsOpen(t *testing.T, ep string) int {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	res, err := hc.Get(ep + "/metrics")
	if err != nil {
		return -1
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(data), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "raftlock_watch_streams %d", &n); err == nil {
			return n
		}
	}
	return -1
}

// WatchPrefix holds one stream on the node it asks, a follower included (nothing forwarded),
// and WatchPrefixes follows several prefixes over one stream: each change once, in order.
func TestWatchPrefixStreamsFromAFollower(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 45*time.Second)
	li, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	follower := dev.Endpoints()[(li+1)%dev.Size()]
	before := streamsOpen(t, follower)
	writer := newClient(t, dev.Endpoints())
	watcher := newClient(t, []string{follower})
	pre := lockName(t, "")
	one := watcher.WatchPrefix(ctx, pre+"a/")
	many := watcher.WatchPrefixes(ctx, []string{pre + "a/", pre + "b/", pre + "a/x"}, 0)
	for _, ch := range []<-chan client.WatchEvent{one, many} {
		if ev := nextEvent(t, ch); !ev.Resync || len(ev.Locks) != 0 {
			t.Fatalf("first event %+v; want an empty resync", ev)
		}
	}
	testkit.Eventually(t, 10*time.Second, "the follower holds both streams", func() bool {
		return streamsOpen(t, follower) == before+2
	})
	ax := lockedMutex(ctx, t, writer, pre+"a/x1")
	lockedMutex(ctx, t, writer, pre+"c/1") // under none of the prefixes
	b := lockedMutex(ctx, t, writer, pre+"b/1")
	expectChanges(t, one, pre, fmt.Sprintf("a/x1:%d", ax.Token()))
	expectChanges(t, many, pre, fmt.Sprintf("a/x1:%d", ax.Token()), fmt.Sprintf("b/1:%d", b.Token()))
}

// Against a node with the long poll but no streams (a version before them), WatchPrefix
// watches by long poll, with the same events.
func TestWatchPrefixFallsBackToTheLongPoll(t *testing.T) {
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/locks" || !r.URL.Query().Has("index") {
			return false
		}
		switch r.URL.Query().Get("index") {
		case "0":
			writeJSON(w, http.StatusOK, api.LockChanges{Locks: []api.Lock{{Name: "x/a", Held: true, Token: 3, ModifyIndex: 3}}, Index: 5, Reset: true})
		case "5":
			writeJSON(w, http.StatusOK, api.LockChanges{Locks: []api.Lock{{Name: "x/a", ModifyIndex: 6}}, Index: 6})
		default:
			<-r.Context().Done()
		}
		return true
	})
	c := newClient(t, []string{f.URL()})
	ch := c.WatchPrefix(testCtx(t, 10*time.Second), "x/")
	if ev := nextEvent(t, ch); !ev.Resync || ev.Index != 5 || len(ev.Locks) != 1 {
		t.Fatalf("first event %+v; want the resync at 5", ev)
	}
	if ev := nextEvent(t, ch); ev.Resync || ev.Lock.Name != "x/a" || ev.Lock.Held || ev.Index != 6 {
		t.Fatalf("second event %+v; want x/a released at 6", ev)
	}
}

// Observe through the node's in-process transport (an embedded node's client) follows the
// election over a stream.
func TestObserveInProcess(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 45*time.Second)
	li, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fi := (li + 1) % dev.Size()
	local, err := client.New([]string{"http://in-process"}, client.WithTransport(dev.Agent(fi).Transport()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	name := lockName(t, "election")
	obs := local.Observe(ctx, name)
	next := func() api.Lock {
		t.Helper()
		select {
		case l := <-obs:
			return l
		case <-time.After(15 * time.Second):
			t.Fatal("no observation")
		}
		return api.Lock{}
	}
	if l := next(); l.Held || l.Name != name {
		t.Fatalf("first observation %+v; want the vacant election", l)
	}
	writer := newClient(t, dev.Endpoints())
	lockedMutex(ctx, t, writer, name+"-other") // a longer name under the same prefix: not this election
	m := lockedMutex(ctx, t, writer, name)
	if l := next(); !l.Held || l.Token != m.Token() {
		t.Fatalf("observed %+v; want the leader at %d", l, m.Token())
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l := next(); l.Held {
		t.Fatalf("observed %+v; want the vacancy", l)
	}
}
