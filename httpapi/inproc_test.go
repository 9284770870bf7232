package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/httpapi"
)

// inProcessURL is the base URL of in-process requests: the transport ignores the host.
const inProcessURL = "http://in-process"

// inProcessDo sends a request through rt and reads the answer in full.
func inProcessDo(ctx context.Context, rt http.RoundTripper, method, path string, body any) response {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return response{err: err}
		}
		rd = strings.NewReader(string(data))
	}
	req, err := http.NewRequestWithContext(ctx, method, inProcessURL+path, rd)
	if err != nil {
		return response{err: err}
	}
	res, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return response{err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: data, err: err}
}

// agentOf returns the agent that serves endpoint ep of d.
func agentOf(t *testing.T, d *agent.Dev, ep string) *agent.Agent {
	t.Helper()
	for i, e := range d.Endpoints() {
		if e == ep {
			return d.Agent(i)
		}
	}
	t.Fatalf("no agent serves %s", ep)
	return nil
}

// A request handed to the handler in memory is answered as over HTTP, on the leader and on a
// follower (which forwards it to the leader over the network): the same statuses, bodies and
// headers, an error body included.
func TestInProcessAnswersAsOverHTTP(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	ctx := t.Context()
	for _, ep := range []string{leader, followers[0]} {
		rt := agentOf(t, d, ep).Transport()
		name := lockName(t)
		var s api.Session
		r := inProcessDo(ctx, rt, http.MethodPost, "/v1/sessions", api.CreateSessionRequest{TTL: "30s"})
		ok(t, r, http.StatusCreated, &s)
		var g api.AcquireResponse
		ok(t, inProcessDo(ctx, rt, http.MethodPost, "/v1/locks/"+name+"/acquire", acquireReq(s.ID, "", nil)), http.StatusOK, &g)
		if g.Session != s.ID || g.Token == 0 {
			t.Fatalf("through %s: grant %+v", ep, g)
		}
		if got := r.header.Get(api.HeaderLeader); got == "" {
			t.Fatalf("through %s: no %s header", ep, api.HeaderLeader)
		}
		inMem := inProcessDo(ctx, rt, http.MethodGet, "/v1/locks/"+name, nil)
		overHTTP := do(t, http.MethodGet, ep+"/v1/locks/"+name, nil)
		if inMem.status != overHTTP.status || string(inMem.body) != string(overHTTP.body) {
			t.Fatalf("through %s: in memory %d %s, over HTTP %d %s", ep, inMem.status, inMem.body, overHTTP.status, overHTTP.body)
		}
		indexHeader(t, inMem)
		other := session(t, ep)
		refused := inProcessDo(ctx, rt, http.MethodPost, "/v1/locks/"+name+"/acquire", acquireReq(other, "", nil))
		apiError(t, refused, http.StatusConflict, api.CodeLockHeld, "holder")
		release(t, ep, name, s.ID, g.Token)
	}
}

// A caller that gives up a long poll sent in memory ends it on the node at once, as closing
// its connection would: a blocking acquire given up leaves the queue, on the leader and
// through a follower.
func TestInProcessLongPollEndsWhenTheCallerGivesUp(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	for _, ep := range []string{leader, followers[0]} {
		name := lockName(t)
		holder := session(t, leader)
		g := mustAcquire(t, leader, name, holder, nil)
		ctx, giveUp := context.WithCancel(t.Context())
		waiting := make(chan response, 1)
		rt := agentOf(t, d, ep).Transport()
		go func() {
			waiting <- inProcessDo(ctx, rt, http.MethodPost, "/v1/locks/"+name+"/acquire", acquireReq(session(t, leader), "5m", nil))
		}()
		waitWaiters(t, leader, name, 1)
		giveUp()
		select {
		case r := <-waiting:
			if !errors.Is(r.err, context.Canceled) {
				t.Fatalf("through %s: the given-up acquire answered %d %s (%v)", ep, r.status, short(r.body), r.err)
			}
		case <-time.After(deadline):
			t.Fatalf("through %s: the given-up acquire did not return", ep)
		}
		waitWaiters(t, leader, name, 0)
		release(t, leader, name, holder, g.Token)
	}
}

// Once its agent stops, the in-process transport refuses requests as a closed port would: a
// dial error, so that the client knows nothing reached the node. A request in flight is cut off.
func TestInProcessRefusedOnceTheServerCloses(t *testing.T) {
	d := ownCluster(t, nil)
	leader, _ := roles(t, d)
	a := agentOf(t, d, leader)
	rt := a.Transport()
	name := lockName(t)
	holder := session(t, leader)
	mustAcquire(t, leader, name, holder, nil)
	waiting := make(chan response, 1)
	s := inProcessDo(t.Context(), rt, http.MethodPost, "/v1/sessions", api.CreateSessionRequest{TTL: "30s"})
	var sess api.Session
	ok(t, s, http.StatusCreated, &sess)
	go func() {
		waiting <- inProcessDo(t.Context(), rt, http.MethodPost, "/v1/locks/"+name+"/acquire", acquireReq(sess.ID, "5m", nil))
	}()
	waitWaiters(t, leader, name, 1)
	a.Kill()
	select {
	case r := <-waiting:
		if r.err == nil && r.status == http.StatusOK {
			t.Fatalf("the acquire in flight answered %d %s after the kill", r.status, short(r.body))
		}
	case <-time.After(deadline):
		t.Fatal("the acquire in flight was not cut off")
	}
	r := inProcessDo(t.Context(), rt, http.MethodGet, "/v1/health", nil)
	var op *net.OpError
	if !errors.As(r.err, &op) || op.Op != "dial" || !errors.Is(r.err, httpapi.ErrInProcessClosed) {
		t.Fatalf("a request after the kill: %d %v, want a dial error", r.status, r.err)
	}
}
