package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
)

// streamClient is the suite's client without a timeout: a stream lasts as long as its test.
// A stream read to its end is checked against the spec.
var streamClient = checking(&http.Client{})

// sse is one Server-Sent Event as a test reads it.
type sse struct {
	event, id string
	data      []byte
}

// openStream asks url for Server-Sent Events with the headers hdr and returns its events, in
// order; the channel closes when the stream ends. It fails the test unless the answer is a
// 200 event stream.
func openStream(t *testing.T, url string, hdr http.Header) <-chan sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	res, err := streamClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if ct := res.Header.Get("Content-Type"); res.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		res.Body.Close()
		t.Fatalf("GET %s as a stream answered %d %s", url, res.StatusCode, ct)
	}
	out := make(chan sse, 64)
	go func() {
		defer close(out)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		var e sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e.event != "" || e.data != nil {
					select {
					case out <- e:
					case <-ctx.Done():
						return
					}
				}
				e = sse{}
			case strings.HasPrefix(line, "event: "):
				e.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				e.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				e.data = append(e.data, line[len("data: "):]...)
			}
		}
	}()
	return out
}

// nextEvent waits for the stream's next event other than progress, or fails the test.
func nextEvent(t *testing.T, events <-chan sse, what string) sse {
	t.Helper()
	timeout := time.After(deadline)
	for {
		select {
		case e, ok := <-events:
			if !ok {
				t.Fatalf("%s: the stream ended", what)
			}
			if e.event != "progress" {
				return e
			}
		case <-timeout:
			t.Fatalf("%s: no event within %v", what, deadline)
		}
	}
}

// untilEvent reads events until ok holds for one of kind, or fails the test.
func untilEvent[T any](t *testing.T, events <-chan sse, kind, what string, ok func(T) bool) T {
	t.Helper()
	for {
		e := nextEvent(t, events, what)
		if e.event != kind {
			t.Fatalf("%s: got a %q event %s", what, e.event, e.data)
		}
		var v T
		if err := json.Unmarshal(e.data, &v); err != nil {
			t.Fatalf("%s: event data %s: %v", what, e.data, err)
		}
		if ok(v) {
			return v
		}
	}
}

func findSession(l api.SessionList, id string) *api.SessionInfo {
	for i := range l.Sessions {
		if l.Sessions[i].ID == id {
			return &l.Sessions[i]
		}
	}
	return nil
}

// The sessions' stream, asked of a follower, is the leader's (time left and last renewal
// included), streamed back: a session created, renewed, holding a lock and destroyed shows in
// the events that follow, each a whole list as GET /v1/sessions answers it.
func TestSessionsStreamShowsEachChange(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	events := openStream(t, followers[0]+"/v1/sessions", nil)
	first := nextEvent(t, events, "the first view")
	var l api.SessionList
	if err := json.Unmarshal(first.data, &l); first.event != "sessions" || err != nil || first.id == "" {
		t.Fatalf("the first event is %q id %q %s (%v); want the sessions with an id", first.event, first.id, first.data, err)
	}

	id := createSession(t, leader, api.CreateSessionRequest{TTL: "30s", Name: "streamed"}).ID
	untilEvent(t, events, "sessions", "the new session", func(l api.SessionList) bool {
		s := findSession(l, id)
		return s != nil && s.Name == "streamed" && s.ExpiresIn != ""
	})
	ok(t, do(t, http.MethodPut, leader+"/v1/sessions/"+id+"/renew", nil), http.StatusOK, nil)
	untilEvent(t, events, "sessions", "the renewal", func(l api.SessionList) bool {
		s := findSession(l, id)
		return s != nil && s.LastRenewal != ""
	})
	name := lockName(t)
	mustAcquire(t, leader, name, id, nil)
	untilEvent(t, events, "sessions", "the lock held", func(l api.SessionList) bool {
		s := findSession(l, id)
		return s != nil && len(s.Locks) == 1 && s.Locks[0] == name
	})
	ok(t, do(t, http.MethodDelete, leader+"/v1/sessions/"+id, nil), http.StatusOK, nil)
	untilEvent(t, events, "sessions", "the session gone", func(l api.SessionList) bool { return findSession(l, id) == nil })
}

// The cluster's stream: a stale one, on a follower, shows a new leader; a linearizable one,
// on the leader, ends with an end event (no_leader) when that node stops leading, rather than
// go on showing what a deposed leader knows.
func TestClusterStreamFollowsTheLeader(t *testing.T) {
	d := ownCluster(t, nil)
	leader, followers := roles(t, d)
	onLeader := openStream(t, leader+"/v1/cluster", nil)
	stale := openStream(t, followers[0]+"/v1/cluster?consistency=stale", nil)
	var before api.Cluster
	before = untilEvent(t, onLeader, "cluster", "the leader's view", func(c api.Cluster) bool { return len(c.Members) == 3 })
	untilEvent(t, stale, "cluster", "the follower's view", func(c api.Cluster) bool { return c.Leader == before.Leader })

	var tr api.TransferResponse
	ok(t, do(t, http.MethodPost, leader+"/v1/cluster/leadership-transfer", nil), http.StatusOK, &tr)
	untilEvent(t, stale, "cluster", "the new leader, on the follower's stream", func(c api.Cluster) bool {
		return c.Leader != "" && c.Leader != before.Leader
	})
	for {
		e := nextEvent(t, onLeader, "the end of the deposed leader's stream")
		if e.event == "cluster" {
			continue // a view from before it stepped down
		}
		var b api.ErrorBody
		if err := json.Unmarshal(e.data, &b); e.event != "end" || err != nil || b.Error.Code != api.CodeNoLeader {
			t.Fatalf("the deposed leader's stream sent %q %s; want an end event with no_leader", e.event, e.data)
		}
		break
	}
	select {
	case e, open := <-onLeader:
		if open {
			t.Fatalf("after its end event the stream sent %q %s", e.event, e.data)
		}
	case <-time.After(deadline):
		t.Fatal("the stream stayed open after its end event")
	}
}

// Under ACL a stream is judged by its token at every event: a token without operator:read
// sees its own sessions only, and the stream ends (an end event, 401) once the token is
// deleted; a token without operator:read cannot open the cluster's stream at all.
func TestViewStreamsFollowTheToken(t *testing.T) {
	eps := aclCluster(t)
	tok := newToken(t, eps[0], newPolicy(t, eps[0], "", rule(uniqueName(t)+"/", api.AccessWrite)))
	if r := doAs(t, tok.SecretID, http.MethodGet, eps[1]+"/v1/cluster", nil); r.status != http.StatusForbidden {
		t.Fatalf("GET /v1/cluster without operator:read answered %d", r.status)
	}
	req, _ := http.NewRequest(http.MethodGet, eps[1]+"/v1/cluster", nil)
	req.Header = as(tok.SecretID)
	req.Header.Set("Accept", "text/event-stream")
	res, err := streamClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("the cluster's stream without operator:read answered %d %s; want 403 JSON", res.StatusCode, res.Header.Get("Content-Type"))
	}

	events := openStream(t, eps[1]+"/v1/sessions", as(tok.SecretID))
	other := sessionAs(t, eps[0], aclRoot)
	own := sessionAs(t, eps[0], tok.SecretID)
	l := untilEvent(t, events, "sessions", "its own session", func(l api.SessionList) bool { return findSession(l, own) != nil })
	if findSession(l, other) != nil {
		t.Fatalf("a token without operator:read was shown another token's session: %+v", l)
	}
	ok(t, doAs(t, aclRoot, http.MethodDelete, eps[0]+"/v1/acl/tokens/"+tok.AccessorID, nil), http.StatusOK, nil)
	for {
		e := nextEvent(t, events, "the end once the token is deleted")
		if e.event == "sessions" {
			continue
		}
		var b api.ErrorBody
		if err := json.Unmarshal(e.data, &b); e.event != "end" || err != nil || b.Error.Code != api.CodeUnauthorized {
			t.Fatalf("after its token's deletion the stream sent %q %s; want an end event, unauthorized", e.event, e.data)
		}
		return
	}
}
