package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// watchURL is a prefix watch of pre from index, waiting up to wait, with extra query params.
func watchURL(ep, pre string, index uint64, wait, extra string) string {
	return fmt.Sprintf("%s/v1/locks?prefix=%s&index=%d&wait=%s%s", ep, pre, index, wait, extra)
}

// watch asks a prefix watch and decodes its answer.
func watch(t *testing.T, ep, pre string, index uint64, wait, extra string) api.LockChanges {
	t.Helper()
	var ch api.LockChanges
	ok(t, do(t, http.MethodGet, watchURL(ep, pre, index, wait, extra), nil), http.StatusOK, &ch)
	return ch
}

// changeLine renders changes as name@modify_index:holder/token/waiters, names without pre.
func changeLine(pre string, locks []api.Lock, sessions map[string]string) string {
	var out []string
	for _, l := range locks {
		who := "free"
		if l.Held {
			who = fmt.Sprintf("%s/%d", sessions[l.Session], l.Token)
		}
		out = append(out, fmt.Sprintf("%s@%d:%s/w%d", strings.TrimPrefix(l.Name, pre), l.ModifyIndex, who, l.Waiters))
	}
	return strings.Join(out, " ")
}

// A prefix watch answers every change under its prefix after its index, in order, each as the
// lock was right after it (a lock handed on in a release, a released lock reading free), and
// only those: a change elsewhere does not answer it. Index 0 answers the whole prefix.
func TestPrefixWatch(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	pre := lockName(t) + "/"
	s1, s2 := session(t, leader), session(t, leader)
	names := map[string]string{s1: "s1", s2: "s2"}

	first := watch(t, followers[0], pre, 0, "30s", "")
	if !first.Reset || len(first.Locks) != 0 || first.Index == 0 {
		t.Fatalf("a watch from index 0 answered %+v; want the whole (empty) prefix, flagged reset", first)
	}
	ans := goDo(t.Context(), http.MethodGet, watchURL(followers[0], pre, first.Index, "30s", ""), nil)
	mustAcquire(t, leader, strings.TrimSuffix(pre, "/")+"x", s1, nil) // beside the prefix, not under it
	a := mustAcquire(t, leader, pre+"a", s1, strp("v1"))
	var got api.LockChanges
	ok(t, await(t, ans, "prefix watch"), http.StatusOK, &got)
	if want := fmt.Sprintf("a@%d:s1/%d/w0", a.Token, a.Token); got.Reset || changeLine(pre, got.Locks, names) != want || got.Index < a.Token {
		t.Fatalf("watch answered %s (index %d, reset %v); want %s", changeLine(pre, got.Locks, names), got.Index, got.Reset, want)
	}
	if got.Locks[0].Value != "v1" || got.Locks[0].Session != s1 {
		t.Fatalf("change %+v", got.Locks[0])
	}

	// Several changes before the next watch: all of them, in order.
	queued := goDo(t.Context(), http.MethodPost, leader+"/v1/locks/"+pre+"a/acquire", acquireReq(s2, "30s", nil))
	waitWaiters(t, leader, pre+"a", 1)
	queuedAt := getLock(t, leader, pre+"a", "").ModifyIndex
	release(t, leader, pre+"a", s1, a.Token)
	var handed api.AcquireResponse
	ok(t, await(t, queued, "queued acquire"), http.StatusOK, &handed)
	b := mustAcquire(t, leader, pre+"b", s1, nil)
	release(t, leader, pre+"b", s1, b.Token)
	freedAt := getLock(t, leader, pre+"b", "").ModifyIndex
	want := fmt.Sprintf("a@%d:s1/%d/w1 a@%d:s2/%d/w0 b@%d:s1/%d/w0 b@%d:free/w0",
		queuedAt, a.Token, handed.Token, handed.Token, b.Token, b.Token, freedAt)
	all := watch(t, followers[1], pre, got.Index, "30s", "")
	if line := changeLine(pre, all.Locks, names); line != want || all.Reset || all.Index < freedAt {
		t.Fatalf("watch answered %s (index %d, reset %v); want %s", line, all.Index, all.Reset, want)
	}
	// A stale watch on a follower gives the same changes, in the same order (as many as the
	// follower has applied).
	stale := watch(t, followers[0], pre, got.Index, "30s", "&consistency=stale")
	if line := changeLine(pre, stale.Locks, names); stale.Reset || !strings.HasPrefix(want, line) || line == "" {
		t.Fatalf("stale watch answered %s; want a prefix of %s", line, want)
	}

	// Nothing changes: an empty answer once the wait ends, from which to go on.
	for _, ep := range []string{leader, followers[0]} {
		start := time.Now()
		idle := watch(t, ep, pre, all.Index, "1s", "")
		if elapsed := time.Since(start); elapsed < time.Second || len(idle.Locks) != 0 || idle.Reset || idle.Index < all.Index {
			t.Fatalf("idle watch via %s answered %+v after %v", ep, idle, elapsed)
		}
	}
	// The whole prefix from index 0: what the lock list shows.
	full := watch(t, leader, pre, 0, "30s", "")
	if line := changeLine(pre, full.Locks, names); !full.Reset || line != fmt.Sprintf("a@%d:s2/%d/w0", handed.Token, handed.Token) {
		t.Fatalf("watch from 0 answered %s (reset %v)", line, full.Reset)
	}
	for _, q := range []string{"&index=abc", "&index=1&wait=11m", "&index=1&wait=x", "&index=-1", "&index=1&consistency=weird"} {
		apiError(t, do(t, http.MethodGet, leader+"/v1/locks?prefix="+pre+q, nil), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

// A node remembers a bounded number of changes: a watch from an index older than what it still
// knows is answered the whole prefix, flagged, so that the watcher knows it missed changes.
func TestPrefixWatchFromForgottenIndexIsAReset(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, func(c *config.Config) { c.WatchHistoryBytes = 64 << 10 })
	leader, followers := roles(t, d)
	pre := lockName(t) + "/"
	s := session(t, leader)
	start := watch(t, leader, pre, 0, "1s", "")
	big := strings.Repeat("v", 4096)
	var last api.AcquireResponse
	for i := range 20 { // 20 changes of 4 KiB values: more than 64 KiB
		last = mustAcquire(t, leader, fmt.Sprintf("%sl%02d", pre, i), s, &big)
	}
	eventually(t, "a follower's stale watch from the forgotten index is a reset", func() string {
		got := watch(t, followers[0], pre, start.Index, "30s", "&consistency=stale")
		if !got.Reset || len(got.Locks) != 20 {
			return fmt.Sprintf("%d locks, reset %v", len(got.Locks), got.Reset)
		}
		return ""
	})
	got := watch(t, leader, pre, start.Index, "30s", "")
	if !got.Reset || len(got.Locks) != 20 || got.Locks[19].Token != last.Token || got.Index < last.Token {
		t.Fatalf("a linearizable watch from a forgotten index answered %d locks, reset %v, index %d", len(got.Locks), got.Reset, got.Index)
	}
	// From there on, changes again.
	release(t, leader, pre+"l00", s, got.Locks[0].Token)
	next := watch(t, leader, pre, got.Index, "30s", "")
	if next.Reset || len(next.Locks) != 1 || next.Locks[0].Held || next.Locks[0].Name != pre+"l00" {
		t.Fatalf("watch after the reset answered %+v", next)
	}
}

// Under --acl a watch answers only the changes the token may read, as the lock list does:
// changes it may not read are passed over, not answered, and a holder's session is shown only
// to those who may see it.
func TestACLPrefixWatchShowsOnlyReadableLocks(t *testing.T) {
	eps := aclCluster(t)
	pre := "acl/" + uniqueName(t) + "/"
	writer := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessWrite)))
	partial := newToken(t, eps[0], newPolicy(t, eps[0], api.AccessNone, rule(pre, api.AccessRead), rule(pre+"hidden/", api.AccessDeny)))
	s := sessionAs(t, eps[0], writer.SecretID)
	watchAs := func(secret, ep string, index uint64) api.LockChanges {
		t.Helper()
		var ch api.LockChanges
		ok(t, doAs(t, secret, http.MethodGet, watchURL(ep, pre, index, "30s", ""), nil), http.StatusOK, &ch)
		return ch
	}
	refused(t, rawDo(http.MethodGet, watchURL(eps[1], pre, 0, "1s", ""), nil, nil), http.StatusUnauthorized, "token")
	first := watchAs(partial.SecretID, eps[1], 0)
	ans := make(chan response, 1)
	go func() {
		ans <- rawDoCtx(t.Context(), http.MethodGet, watchURL(eps[1], pre, first.Index, "30s", ""), nil, as(partial.SecretID))
	}()
	ok(t, doAs(t, writer.SecretID, http.MethodPost, eps[0]+"/v1/locks/"+pre+"hidden/x/acquire", acquireReq(s, "", nil)), http.StatusOK, nil)
	var a api.AcquireResponse
	ok(t, doAs(t, writer.SecretID, http.MethodPost, eps[0]+"/v1/locks/"+pre+"a/acquire", acquireReq(s, "", nil)), http.StatusOK, &a)
	r := await(t, ans, "watch as a token that may read part of the prefix")
	var got api.LockChanges
	ok(t, r, http.StatusOK, &got)
	if len(got.Locks) != 1 || got.Locks[0].Name != pre+"a" || got.Locks[0].Token != a.Token || got.Reset {
		t.Fatalf("watch answered %s; want only the change of %sa", r.body, pre)
	}
	var raw struct{ Locks []map[string]json.RawMessage }
	if err := json.Unmarshal(r.body, &raw); err != nil || len(raw.Locks) != 1 {
		t.Fatalf("watch answered %s: %v", r.body, err)
	}
	if _, shown := raw.Locks[0]["session"]; shown {
		t.Fatalf("the holder's session was shown to a token that may not see it: %s", r.body)
	}
	for _, ep := range eps {
		full := watchAs(partial.SecretID, ep, 0)
		if len(full.Locks) != 1 || full.Locks[0].Name != pre+"a" || !full.Reset {
			t.Fatalf("the whole prefix via %s for a token that may read part of it: %+v", ep, full)
		}
		if mine := watchAs(writer.SecretID, ep, 0); len(mine.Locks) != 2 || mine.Locks[0].Session != s {
			t.Fatalf("the whole prefix via %s for the holder's token: %+v", ep, mine)
		}
	}
}

// A linearizable watch waiting on a leader that stops leading is answered at once with
// 503 no_leader, so that its client asks the new leader, rather than wait out its wait on a
// node that no longer learns of changes first.
func TestWatchOnALeaderThatStepsDownEndsAtOnce(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, nil)
	leader, _ := roles(t, d)
	pre := lockName(t) + "/"
	first := watch(t, leader, pre, 0, "1s", "")
	ans := goDo(t.Context(), http.MethodGet, watchURL(leader, pre, first.Index, "5m", ""), nil)
	eventually(t, "the watch waits on the leader", func() string {
		r := do(t, http.MethodGet, leader+"/metrics", nil)
		if !strings.Contains(string(r.body), "\nraftlock_blocking_queries 1\n") {
			return "raftlock_blocking_queries is not 1"
		}
		return ""
	})
	ok(t, do(t, http.MethodPost, leader+"/v1/cluster/leadership-transfer", nil), http.StatusOK, nil)
	apiError(t, await(t, ans, "the watch on the old leader"), http.StatusServiceUnavailable, api.CodeNoLeader)
}

// A backup restored over the cluster replaces the whole state at an index above every one used
// before, though the restored locks' modify indexes lie below what watchers have seen: a watch
// waiting then (or asking from before it) is answered the whole prefix, flagged reset.
func TestPrefixWatchAcrossABackupRestoreIsAReset(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, nil)
	leader, followers := roles(t, d)
	pre := lockName(t) + "/"
	s := session(t, leader)
	a := mustAcquire(t, leader, pre+"a", s, nil)
	saved := do(t, http.MethodGet, leader+"/v1/snapshot", nil)
	if saved.status != http.StatusOK {
		t.Fatalf("GET /v1/snapshot: %d %s", saved.status, short(saved.body))
	}
	release(t, leader, pre+"a", s, a.Token)
	mustAcquire(t, leader, pre+"b", s, nil)
	now := watch(t, leader, pre, 0, "1s", "")
	waiting := []<-chan response{
		goDo(t.Context(), http.MethodGet, watchURL(followers[0], pre, now.Index, "5m", ""), nil),
		goDo(t.Context(), http.MethodGet, watchURL(followers[1], pre, now.Index, "5m", "&consistency=stale"), nil),
	}
	eventually(t, "the watches wait", func() string {
		n := 0
		for _, ep := range d.Endpoints() {
			r := do(t, http.MethodGet, ep+"/metrics", nil)
			n += strings.Count(string(r.body), "\nraftlock_blocking_queries 1\n")
		}
		if n < 2 {
			return fmt.Sprintf("%d nodes with a waiting watch", n)
		}
		return ""
	})
	var res api.RestoreResponse
	restored := rawDo(http.MethodPut, followers[0]+"/v1/snapshot", saved.body, http.Header{"Content-Type": {"application/octet-stream"}})
	if restored.err != nil {
		t.Fatal(restored.err)
	}
	ok(t, restored, http.StatusOK, &res)
	for i, ans := range waiting {
		var got api.LockChanges
		ok(t, await(t, ans, "a watch waiting across the restore"), http.StatusOK, &got)
		// The restore ends every session: nothing under the prefix is held after it.
		if !got.Reset || len(got.Locks) != 0 || got.Index < res.Index {
			t.Fatalf("watch %d answered %+v across a restore at %d; want a reset listing no held lock", i, got, res.Index)
		}
	}
	if got := watch(t, leader, pre, now.Index, "5m", ""); !got.Reset {
		t.Fatalf("a watch from before the restore answered %+v; want a reset", got)
	}
}
