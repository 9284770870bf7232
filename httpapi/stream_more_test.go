package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// A stream from an index its node no longer remembers starts with the state (a reset,
// too_old); a restore ends every open stream with a reset without state, and resuming from the
// last id then gives the state as the restore left it.
func TestStreamResetOnForgottenIndexAndRestore(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, func(c *config.Config) { c.WatchHistoryBytes = 64 << 10 })
	leader, followers := roles(t, d)
	pre := lockName(t) + "/"
	s := session(t, leader)
	first := mustAcquire(t, leader, pre+"first", s, nil)
	big := strings.Repeat("v", 4096)
	for i := range 20 { // 20 changes of 4 KiB values: more than 64 KiB
		mustAcquire(t, leader, fmt.Sprintf("%sl%02d", pre, i), s, &big)
	}
	old := openStream(t, http.MethodGet, streamURL(followers[0], pre, first.Token), nil, nil)
	r := reset(t, old.next(t))
	if r.Reason != api.ResetTooOld || len(r.Locks) != 21 {
		t.Fatalf("a stream from a forgotten index began with %s %d locks; want too_old and all 21", r.Reason, len(r.Locks))
	}
	old.close()

	saved := do(t, http.MethodGet, leader+"/v1/snapshot", nil)
	if saved.status != http.StatusOK {
		t.Fatalf("GET /v1/snapshot: %d %s", saved.status, short(saved.body))
	}
	after := mustAcquire(t, leader, pre+"after", s, nil)
	var streams []*sseStream
	for _, ep := range []string{leader, followers[0], followers[1]} {
		st := openStream(t, http.MethodGet, streamURL(ep, pre, after.Token), nil, nil)
		streams = append(streams, st)
	}
	// Each stream is registered once a change after it comes through.
	last := mustAcquire(t, leader, pre+"last", s, nil)
	for _, st := range streams {
		if c := change(t, st.next(t)); c.Index != last.Token {
			t.Fatalf("change %d; want %d", c.Index, last.Token)
		}
	}
	var res api.RestoreResponse
	ok(t, rawDo(http.MethodPut, followers[1]+"/v1/snapshot", saved.body, http.Header{"Content-Type": {"application/octet-stream"}}), http.StatusOK, &res)
	for i, st := range streams {
		evs := st.ended(t)
		if len(evs) != 1 {
			t.Fatalf("stream %d: %v across a restore; want one reset, then the end", i, evs)
		}
		r := reset(t, evs[0])
		if r.Reason != api.ResetRestored || r.Locks != nil || evs[0].id != "" {
			t.Fatalf("stream %d ended with %v; want a reset without state or id, reason restored", i, evs[0])
		}
	}
	again := openStream(t, http.MethodGet, streamURL(followers[0], pre, last.Token), nil, nil)
	r = reset(t, again.next(t))
	// The restore ends every session: nothing under the prefix is held after it.
	if r.Reason != api.ResetTooOld || r.Locks == nil || len(r.Locks) != 0 || r.Index < res.Index {
		t.Fatalf("resumed across the restore at %d: %+v; want the state (nothing held), too_old", res.Index, r)
	}
}

// Under --acl a stream holds only the locks its token may read now: a policy narrowed while it
// is open narrows it, and deleting the token ends it.
func TestStreamACL(t *testing.T) {
	eps := aclCluster(t)
	leader, follower := eps[0], eps[1]
	base := uniqueName(t) + "/"
	policy := newPolicy(t, leader, "", rule(base+"a/", api.AccessRead))
	tok := newToken(t, leader, policy)
	root := sessionAs(t, leader, aclRoot)
	acquire := func(name string) api.AcquireResponse {
		t.Helper()
		var a api.AcquireResponse
		ok(t, doAs(t, aclRoot, http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(root, "", nil)), http.StatusOK, &a)
		return a
	}
	acquire(base + "a/1")
	acquire(base + "b/1")
	st := openStream(t, http.MethodGet, streamURL(follower, base, 0), nil, as(tok.SecretID))
	r := reset(t, st.next(t))
	if len(r.Locks) != 1 || r.Locks[0].Name != base+"a/1" || r.Locks[0].Session != "" {
		t.Fatalf("the state under the token's view: %+v; want only a/1, its session hidden", r.Locks)
	}
	acquire(base + "b/2")
	a2 := acquire(base + "a/2")
	if c := change(t, st.next(t)); c.Index != a2.Token || len(c.Locks) != 1 || c.Locks[0].Name != base+"a/2" {
		t.Fatalf("got %+v; want a/2 alone (b/2 is not the token's to read)", c)
	}
	// Narrow the policy to c/: a/ changes no longer come.
	ok(t, doAs(t, aclRoot, http.MethodPut, leader+"/v1/acl/policies/"+policy, api.Policy{Locks: []api.LockRule{rule(base+"c/", api.AccessRead)}}), http.StatusOK, nil)
	acquire(base + "a/3")
	c1 := acquire(base + "c/1")
	if c := change(t, st.next(t)); c.Index != c1.Token || c.Locks[0].Name != base+"c/1" {
		t.Fatalf("after the policy narrowed: %+v; want c/1 (and nothing of a/3)", c)
	}
	ok(t, doAs(t, aclRoot, http.MethodDelete, leader+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusOK, nil)
	evs := st.ended(t)
	if len(evs) != 1 {
		t.Fatalf("after the token's deletion: %v; want one end event", evs)
	}
	if eb := endError(t, evs[0]); eb.Error.Code != api.CodeUnauthorized {
		t.Fatalf("the stream ended with %+v; want unauthorized", eb)
	}
	// A stream of an unknown token never opens.
	if st, r := tryStream(t, http.MethodGet, streamURL(follower, base, 0), nil, as(tok.SecretID)); st != nil || r.status != http.StatusUnauthorized {
		t.Fatalf("a deleted token's stream: %d; want 401", r.status)
	}
}

// A stream that reads too slowly is dropped with a reset ("behind"), without id, once its
// buffer fills; a stream beside it on the same prefix gets every change, on time.
func TestStreamSlowSubscriberDropped(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, func(c *config.Config) { c.StreamBuffer = 4 })
	leader, followers := roles(t, d)
	pre := lockName(t) + "/"
	s := session(t, leader)
	ep := followers[0]
	fast := openStream(t, http.MethodGet, streamURL(ep, pre, 0), nil, nil)
	reset(t, fast.next(t))

	// The slow one goes through the node's in-process transport, where a write waits for
	// the reader: reading nothing, it holds up its own stream at once.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, streamURL("http://in-process", pre, 0), nil)
	req.Header.Set("Accept", "text/event-stream")
	slow, err := agentOf(t, d, ep).Transport().RoundTrip(req)
	if err != nil || slow.StatusCode != http.StatusOK {
		t.Fatalf("the slow stream: %v %v", err, slow)
	}
	defer slow.Body.Close()
	sc := bufio.NewScanner(slow.Body)
	var events []string
	var ev, id string
	read := func() bool {
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				id = line[len("id: "):]
			case line == "":
				events = append(events, ev+"#"+id)
				ev, id = "", ""
				return true
			}
		}
		return false
	}
	if !read() || !strings.HasPrefix(events[0], api.EventReset+"#") {
		t.Fatalf("the slow stream began with %v; want its reset", events)
	}
	// From here on it reads nothing until the changes are made; both streams wait in the hub.
	eventually(t, "both streams wait for changes", func() string {
		if !strings.Contains(string(metricsPage(t, ep)), "\nraftlock_watch_streams 2\n") {
			return "not yet"
		}
		return ""
	})
	var tokens []uint64
	for i := range 12 {
		a := mustAcquire(t, leader, fmt.Sprintf("%s%02d", pre, i), s, nil)
		tokens = append(tokens, a.Token)
	}
	for _, want := range tokens {
		if c := change(t, fast.next(t)); c.Index != want {
			t.Fatalf("the fast stream got %d; want %d", c.Index, want)
		}
	}
	for read() {
	}
	// Its reset, the changes its writer took before it stopped reading, at most its buffer
	// of 4 more, and the reset that dropped it: short of the 12 changes.
	if n := len(events); n < 3 || n-2 >= len(tokens) || events[n-1] != api.EventReset+"#" {
		t.Fatalf("the slow stream read %v; want its first events (at most its buffer), then a reset without id, then the end", events)
	}
	for i, e := range events[1 : len(events)-1] {
		if want := fmt.Sprintf("%s#%d", api.EventChange, tokens[i]); e != want {
			t.Fatalf("the slow stream's event %d is %s; want %s", i+1, e, want)
		}
	}
	if !strings.Contains(string(metricsPage(t, ep)), "\nraftlock_watch_streams_dropped_total 1\n") {
		t.Fatalf("the drop is not counted")
	}
}

// A follower that hears from no leader for longer than an election timeout tells its streams
// at once (a progress event with leader_silent_ms), ends them with an end event (no_leader)
// once the silence has lasted three, and refuses new ones: it never looks quietly current,
// and a heartbeat late by less than that ends nothing.
func TestStreamLeaderlessFollowerEnds(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, nil)
	li, err := d.WaitLeader(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fi := (li + 1) % d.Size()
	ep := d.Endpoints()[fi]
	timeout := d.Config(fi).ElectionTimeout
	pre := lockName(t) + "/"
	st := openStream(t, http.MethodGet, streamURL(ep, pre, 0)+"&consistency=stale", nil, nil)
	reset(t, st.next(t))
	for i := range d.Size() {
		if i != fi {
			if err := d.Kill(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	var silent []int64
	var end *sseEvent
	for end == nil {
		select {
		case ev, ok := <-st.events:
			if !ok {
				t.Fatalf("the stream closed without an end event (told silent at %v ms)", silent)
			}
			switch ev.name {
			case api.EventProgress:
				var p api.StreamProgress
				if err := json.Unmarshal(ev.data, &p); err != nil {
					t.Fatal(err)
				}
				if p.LeaderSilentMs != 0 {
					silent = append(silent, p.LeaderSilentMs)
				}
			case api.EventEnd:
				end = &ev
			default:
				t.Fatalf("the follower cut off sent %v", ev)
			}
		case <-time.After(3 * deadline):
			t.Fatal("the cut-off follower's stream did not end")
		}
	}
	if eb := endError(t, *end); eb.Error.Code != api.CodeNoLeader {
		t.Fatalf("ended with %+v; want no_leader", eb)
	}
	if len(silent) == 0 || silent[0] <= timeout.Milliseconds() || silent[0] > 3*timeout.Milliseconds() {
		t.Fatalf("progress events told a silence of %v ms before the end; want one between one and three election timeouts (%v each)", silent, timeout)
	}
	if st, r := tryStream(t, http.MethodGet, streamURL(ep, pre, 0)+"&consistency=stale", nil, nil); st != nil || r.status != http.StatusServiceUnavailable {
		t.Fatalf("a new stream on the cut-off follower: %d; want 503", r.status)
	}
}
