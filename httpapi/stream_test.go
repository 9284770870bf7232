package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// sseEvent is one Server-Sent Event as a stream's client reads it.
type sseEvent struct {
	name string
	id   string // "" when the event has no id line
	data []byte
}

func (e sseEvent) String() string { return fmt.Sprintf("%s#%s %s", e.name, e.id, e.data) }

// sseStream is an open streamed watch.
type sseStream struct {
	resp   *http.Response
	events chan sseEvent // closed at the end of the answer
	cancel context.CancelFunc
}

// openStream opens a stream; it fails the test unless the answer is 200 text/event-stream.
func openStream(t *testing.T, method, url string, body any, hdr http.Header) *sseStream {
	t.Helper()
	st, r := tryStream(t, method, url, body, hdr)
	if st == nil {
		t.Fatalf("%s %s: %d %s; want a stream", method, url, r.status, short(r.body))
	}
	return st
}

// tryStream opens a stream, or returns the answer that refused it, read in full.
func tryStream(t *testing.T, method, url string, body any, hdr http.Header) (*sseStream, response) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := body.(string); ok {
			data = []byte(s)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(url, "stream=1") {
		req.Header.Set("Accept", "text/event-stream")
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, response{status: resp.StatusCode, header: resp.Header, body: data}
	}
	st := &sseStream{resp: resp, events: make(chan sseEvent, 4096), cancel: cancel}
	t.Cleanup(st.close)
	go func() {
		defer close(st.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != nil {
					st.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = []byte(line[len("data: "):])
			}
		}
	}()
	return st, response{status: resp.StatusCode, header: resp.Header}
}

func (s *sseStream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next returns the next event other than progress, failing the test if none comes in time or
// the stream ends.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	for {
		ev := s.nextAny(t)
		if ev.name != api.EventProgress {
			return ev
		}
	}
}

// nextAny returns the next event, progress included.
func (s *sseStream) nextAny(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatalf("the stream ended; want an event")
		}
		return ev
	case <-time.After(deadline):
		t.Fatalf("no event within %v", deadline)
	}
	return sseEvent{}
}

// ended waits for the end of the stream, returning the events before it.
func (s *sseStream) ended(t *testing.T) []sseEvent {
	t.Helper()
	var out []sseEvent
	timeout := time.After(3 * deadline)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return out
			}
			if ev.name != api.EventProgress {
				out = append(out, ev)
			}
		case <-timeout:
			t.Fatalf("the stream did not end; events so far: %v", out)
		}
	}
}

// change decodes a change event, failing the test on any other.
func change(t *testing.T, ev sseEvent) api.StreamChange {
	t.Helper()
	var c api.StreamChange
	if ev.name != api.EventChange || json.Unmarshal(ev.data, &c) != nil {
		t.Fatalf("got %v; want a change event", ev)
	}
	if ev.id != strconv.FormatUint(c.Index, 10) {
		t.Fatalf("change event %v: its id is not its index", ev)
	}
	return c
}

// reset decodes a reset event, failing the test on any other.
func reset(t *testing.T, ev sseEvent) api.StreamReset {
	t.Helper()
	var r api.StreamReset
	if ev.name != api.EventReset || json.Unmarshal(ev.data, &r) != nil {
		t.Fatalf("got %v; want a reset event", ev)
	}
	return r
}

// endError decodes an end event, failing the test on any other.
func endError(t *testing.T, ev sseEvent) api.ErrorBody {
	t.Helper()
	var eb api.ErrorBody
	if ev.name != api.EventEnd || json.Unmarshal(ev.data, &eb) != nil || eb.Error.Code == "" {
		t.Fatalf("got %v; want an end event with an error body", ev)
	}
	return eb
}

func streamURL(ep, pre string, index uint64) string {
	return fmt.Sprintf("%s/v1/locks?prefix=%s&index=%d", ep, pre, index)
}

// A stream on a follower starts with the prefix's state (a reset), then gives every change
// under the prefix, one event per command, in log order, its id the command's index, each lock
// as it was right after it; a change elsewhere gives nothing. Reconnecting with Last-Event-ID
// goes on after that event: nothing repeated, nothing skipped.
func TestStreamEventsInOrderAndResume(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	pre := lockName(t) + "/"
	s1, s2 := session(t, leader), session(t, leader)
	names := map[string]string{s1: "s1", s2: "s2"}

	st := openStream(t, http.MethodGet, streamURL(followers[0], pre, 0), nil, nil)
	first := reset(t, st.next(t))
	if first.Reason != api.ResetStart || first.Locks == nil || len(first.Locks) != 0 || first.Index == 0 {
		t.Fatalf("the first event of a stream from 0 is %+v; want the (empty) state, reason start", first)
	}
	mustAcquire(t, leader, strings.TrimSuffix(pre, "/")+"x", s1, nil) // beside the prefix
	a := mustAcquire(t, leader, pre+"a", s1, strp("v1"))
	waitReq := goDo(t.Context(), http.MethodPost, leader+"/v1/locks/"+pre+"a/acquire", acquireReq(s2, "30s", nil))
	waitWaiters(t, leader, pre+"a", 1)
	release(t, leader, pre+"a", s1, a.Token)
	var granted api.AcquireResponse
	ok(t, await(t, waitReq, "queued acquire"), http.StatusOK, &granted)

	var lines []string
	var ids []uint64
	for len(lines) < 3 {
		c := change(t, st.next(t))
		ids = append(ids, c.Index)
		for _, l := range c.Locks {
			if l.ModifyIndex != c.Index {
				t.Fatalf("change %d holds a lock of index %d", c.Index, l.ModifyIndex)
			}
		}
		lines = append(lines, changeLine(pre, c.Locks, names))
	}
	want := []string{
		fmt.Sprintf("a@%d:s1/%d/w0", a.Token, a.Token),
		fmt.Sprintf("a@%d:s1/%d/w1", ids[1], a.Token),
		fmt.Sprintf("a@%d:s2/%d/w0", granted.Token, granted.Token),
	}
	if strings.Join(lines, " | ") != strings.Join(want, " | ") {
		t.Fatalf("the stream gave\n  %s\nwant\n  %s", strings.Join(lines, " | "), strings.Join(want, " | "))
	}
	if !(first.Index < ids[0] && ids[0] < ids[1] && ids[1] < ids[2]) {
		t.Fatalf("ids %v after the reset's %d are not increasing", ids, first.Index)
	}
	st.close()

	// Resume on the other follower and on the leader, after the first change.
	// The query flag stream=1 is the Accept header's equal.
	for _, url := range []string{streamURL(followers[1], pre, 0), streamURL(leader, pre, 0) + "&stream=1"} {
		ep := url
		hdr := http.Header{api.HeaderLastEventID: {strconv.FormatUint(ids[0], 10)}}
		again := openStream(t, http.MethodGet, url, nil, hdr)
		if c := change(t, again.next(t)); c.Index != ids[1] {
			t.Fatalf("resumed after %d on %s: first change %d; want %d", ids[0], ep, c.Index, ids[1])
		}
		if c := change(t, again.next(t)); c.Index != ids[2] {
			t.Fatalf("resumed after %d on %s: second change %d; want %d", ids[0], ep, c.Index, ids[2])
		}
		again.close()
	}
}

// One POST /v1/watch follows several prefixes: a change under two of them comes once, and a
// command's changes under different prefixes come in one event.
func TestStreamManyPrefixes(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	base := lockName(t)
	p1, p2, p3 := base+"/a/", base+"/b/", base+"/a/deep/"
	s1 := session(t, leader)
	st := openStream(t, http.MethodPost, followers[0]+"/v1/watch?prefix="+p3, api.WatchRequest{Prefixes: []string{p1, p2, p1}}, nil)
	if r := reset(t, st.next(t)); r.Reason != api.ResetStart || len(r.Locks) != 0 {
		t.Fatalf("first event %+v; want the empty state", r)
	}
	deep := mustAcquire(t, leader, p3+"x", s1, nil)
	other := mustAcquire(t, leader, base+"/c/x", s1, nil)
	b := mustAcquire(t, leader, p2+"x", s1, nil)
	for _, want := range []struct {
		index uint64
		name  string
	}{{deep.Token, p3 + "x"}, {b.Token, p2 + "x"}} {
		c := change(t, st.next(t))
		if c.Index != want.index || len(c.Locks) != 1 || c.Locks[0].Name != want.name {
			t.Fatalf("got change %+v; want %s once at %d (and nothing of %d)", c, want.name, want.index, other.Token)
		}
	}
	// Destroying the session releases all three in one command: one event, two locks.
	if r := do(t, http.MethodDelete, leader+"/v1/sessions/"+s1, nil); r.status != http.StatusOK && r.status != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", r.status, short(r.body))
	}
	c := change(t, st.next(t))
	if len(c.Locks) != 2 || c.Locks[0].Held || c.Locks[1].Held {
		t.Fatalf("the session's end gave %+v; want both watched locks free, in one event", c)
	}
}

// A stream's bad input is refused before any event, with the API's error body.
func TestStreamBadInput(t *testing.T) {
	d := sharedCluster(t)
	ep := d.Endpoints()[0]
	many := make([]string, api.MaxWatchPrefixes+1)
	for i := range many {
		many[i] = fmt.Sprintf("p%d/", i)
	}
	for _, tc := range []struct {
		what   string
		method string
		url    string
		body   any
		hdr    http.Header
	}{
		{"unknown field", http.MethodPost, ep + "/v1/watch", `{"prefixes":["a/"],"bogus":1}`, nil},
		{"no prefix", http.MethodPost, ep + "/v1/watch", `{}`, nil},
		{"too many prefixes", http.MethodPost, ep + "/v1/watch", api.WatchRequest{Prefixes: many}, nil},
		{"long prefix", http.MethodPost, ep + "/v1/watch", api.WatchRequest{Prefixes: []string{strings.Repeat("x", 257)}}, nil},
		{"malformed JSON", http.MethodPost, ep + "/v1/watch", `{"prefixes":`, nil},
		{"bad Last-Event-ID", http.MethodGet, streamURL(ep, "a/", 0), nil, http.Header{api.HeaderLastEventID: {"x1"}}},
		{"bad index", http.MethodGet, ep + "/v1/locks?prefix=a/&index=-1", nil, nil},
		{"bad consistency", http.MethodPost, ep + "/v1/watch?consistency=maybe", api.WatchRequest{Prefixes: []string{"a/"}}, nil},
	} {
		t.Run(tc.what, func(t *testing.T) {
			st, r := tryStream(t, tc.method, tc.url, tc.body, tc.hdr)
			if st != nil {
				t.Fatalf("a stream opened; want 400")
			}
			apiError(t, r, http.StatusBadRequest, api.CodeInvalidArgument)
		})
	}
}

// A quiet stream gets progress events: every change up to their id was sent, and the node's
// applied index.
func TestStreamProgress(t *testing.T) {
	d := ownCluster(t, func(c *config.Config) { c.StreamProgress = 100 * time.Millisecond })
	leader, followers := roles(t, d)
	pre := lockName(t) + "/"
	a := mustAcquire(t, leader, pre+"a", session(t, leader), nil)
	st := openStream(t, http.MethodGet, streamURL(followers[0], pre, 0), nil, nil)
	r := reset(t, st.next(t))
	if len(r.Locks) != 1 || r.Index < a.Token {
		t.Fatalf("reset %+v; want lock a, at least as new as %d", r, a.Token)
	}
	for {
		ev := st.nextAny(t)
		if ev.name != api.EventProgress {
			t.Fatalf("got %v on a quiet prefix; want progress", ev)
		}
		var p api.StreamProgress
		if err := json.Unmarshal(ev.data, &p); err != nil || ev.id != strconv.FormatUint(p.Index, 10) {
			t.Fatalf("progress %v: bad data or id", ev)
		}
		if p.Index >= r.Index && p.AppliedIndex >= p.Index {
			return
		}
	}
}
