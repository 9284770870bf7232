package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/config"
)

// nextEvent waits for the next event of a watch, failing the test after a while.
func nextEvent(t *testing.T, ch <-chan client.WatchEvent) client.WatchEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("WatchPrefix channel closed")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event")
	}
	return client.WatchEvent{}
}

// changeText renders a change as name:holder@token, or name:free, names without pre.
func changeText(pre string, l api.Lock) string {
	if !l.Held {
		return strings.TrimPrefix(l.Name, pre) + ":free"
	}
	return fmt.Sprintf("%s:%d", strings.TrimPrefix(l.Name, pre), l.Token)
}

// expectChanges reads the next len(want) events, which must be changes (not resyncs) reading
// want, in order.
func expectChanges(t *testing.T, ch <-chan client.WatchEvent, pre string, want ...string) {
	t.Helper()
	var got []string
	for range want {
		ev := nextEvent(t, ch)
		if ev.Resync || ev.Err != nil {
			t.Fatalf("after %v: event %+v, want a change", got, ev)
		}
		if ev.Index != ev.Lock.ModifyIndex {
			t.Fatalf("change %+v: index %d", ev.Lock, ev.Index)
		}
		got = append(got, changeText(pre, ev.Lock))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("changes %v, want %v", got, want)
	}
}

// WatchPrefix starts with the prefix as it stands, then delivers every change under it, in
// order, each as the lock was right after it: a handoff to a waiter, a release, a change of
// value; and nothing of locks beside the prefix.
func TestWatchPrefixDeliversEveryChangeInOrder(t *testing.T) {
	dev := sharedCluster(t)
	ctx := testCtx(t, 45*time.Second)
	c := newClient(t, dev.Endpoints())
	pre := lockName(t, "")
	a := lockedMutex(ctx, t, c, pre+"a")

	ch := c.WatchPrefix(ctx, pre)
	first := nextEvent(t, ch)
	if !first.Resync || len(first.Locks) != 1 || first.Locks[0].Name != pre+"a" || first.Locks[0].Token != a.Token() {
		t.Fatalf("first event %+v: want a resync listing %sa", first, pre)
	}
	lockedMutex(ctx, t, c, strings.TrimSuffix(pre, "/")+"-beside") // not under the prefix
	b := client.NewMutex(newSession(t, c), pre+"a")
	locked := make(chan error, 1)
	go func() { locked <- b.Lock(ctx) }()
	waitWaiters(ctx, t, c, pre+"a", 1)
	aTok := a.Token()
	if err := a.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	bTok := b.Token()
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	d := lockedMutex(ctx, t, c, pre+"d")
	expectChanges(t, ch, pre, fmt.Sprintf("a:%d", aTok) /* b queued */, fmt.Sprintf("a:%d", bTok), "a:free",
		fmt.Sprintf("d:%d", d.Token()))
}

// A watch goes on through a crash of the leader's node without missing or repeating a change.
func TestWatchPrefixSurvivesALeaderCrash(t *testing.T) {
	dev := ownCluster(t)
	ctx := testCtx(t, 60*time.Second)
	c := newClient(t, dev.Endpoints())
	pre := lockName(t, "")
	ch := c.WatchPrefix(ctx, pre)
	if ev := nextEvent(t, ch); !ev.Resync || len(ev.Locks) != 0 {
		t.Fatalf("first event %+v: want an empty resync", ev)
	}
	var want []string
	churn := func(names ...string) {
		for _, n := range names {
			m := lockedMutex(ctx, t, c, pre+n)
			want = append(want, fmt.Sprintf("%s:%d", n, m.Token()))
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			want = append(want, n+":free")
		}
	}
	churn("a", "b")
	crashLeader(ctx, t, dev)
	churn("c", "a")
	expectChanges(t, ch, pre, want...)
}

// A watcher that fell behind what the node remembers gets a resync: the prefix as it stands,
// told apart from a change, and then changes again. (By long poll: a stream's changes wait in
// the connection's buffers for a reader that pauses, so this one would not fall behind.)
func TestWatchPrefixResyncsWhenTheClusterForgot(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	dev, err := agent.StartDev(ctx, agent.DevOptions{Tune: func(c *config.Config) { c.WatchHistoryBytes = 64 << 10 }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	c := newClient(t, dev.Endpoints())
	pre := lockName(t, "")
	ch := c.WatchPrefix(ctx, pre, client.LongPoll())
	nextEvent(t, ch) // the first resync; then nobody reads while the cluster forgets
	s := newSession(t, c)
	big := strings.Repeat("v", 4096)
	var last *client.Mutex
	for i := range 20 {
		last = client.NewMutex(s, fmt.Sprintf("%sl%02d", pre, i), client.WithValue(big))
		if err := last.Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var resync client.WatchEvent
	for !resync.Resync {
		// The watch may have asked once before the cluster forgot: those changes come first.
		resync = nextEvent(t, ch)
	}
	if len(resync.Locks) != 20 || resync.Locks[19].Token != last.Token() || resync.Index < last.Token() {
		t.Fatalf("resync of %d locks at %d; want 20, the last under %d", len(resync.Locks), resync.Index, last.Token())
	}
	if err := last.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	expectChanges(t, ch, pre, "l19:free")
}

// A cluster that answers ?index with the plain lock list (a version before watches) ends the
// watch with an error instead of delivering its list again and again.
func TestWatchPrefixEndsOnAServerWithoutWatches(t *testing.T) {
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/locks" {
			return false
		}
		writeJSON(w, http.StatusOK, api.LockList{Locks: []api.Lock{{Name: "x/a", Held: true, Token: 3, ModifyIndex: 3}}})
		return true
	})
	c := newClient(t, []string{f.URL()})
	ev := nextEvent(t, c.WatchPrefix(testCtx(t, 10*time.Second), "x/"))
	if ev.Err == nil || !errors.Is(ev.Err, client.ErrNotFound) {
		t.Fatalf("event %+v: want the watch ended with ErrNotFound", ev)
	}
}

// A refusal the cluster will answer again (here a 403) ends the watch with that error.
func TestWatchPrefixEndsOnARefusal(t *testing.T) {
	f := newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
		writeError(w, http.StatusForbidden, api.CodeForbidden, "no read access", nil)
		return true
	})
	c := newClient(t, []string{f.URL()})
	ch := c.WatchPrefix(testCtx(t, 10*time.Second), "x/")
	if ev := nextEvent(t, ch); !errors.Is(ev.Err, client.ErrForbidden) {
		t.Fatalf("event %+v: want the watch ended with ErrForbidden", ev)
	}
	if _, open := <-ch; open {
		t.Fatal("the channel stayed open after the error")
	}
}
