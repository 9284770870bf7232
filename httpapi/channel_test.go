package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/httpapi"
)

// A follower forwards writes over the peer channel once the cluster enabled it, and over HTTP
// in a cluster with a member of a version before it (a node started without the feature stands
// in for one); the client cannot tell the two apart: the same requests, through a follower of
// each cluster, get the same answers, status, headers and body, errors included (ids, names,
// tokens and indexes aside, which differ from run to run).
func TestForwardOverChannelAnswersAsHTTP(t *testing.T) {
	withChannel := sharedCluster(t)
	mixed := mixedCluster(t)

	_, followers := roles(t, withChannel)
	viaChannel := followers[0]
	_, followers = roles(t, mixed)
	viaHTTP := followers[0]
	// The mixed cluster's follower must be one that would use the channel if it could.
	for _, f := range followers {
		if !strings.HasSuffix(f, mixed.Endpoints()[2]) {
			viaHTTP = f
		}
	}

	beforeCh, beforeHTTP := forwardedVia(t, viaChannel), forwardedVia(t, viaHTTP)
	a := forwardScript(t, viaChannel)
	b := forwardScript(t, viaHTTP)
	if len(a) != len(b) {
		t.Fatalf("%d answers through the channel, %d over HTTP", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("answer %d differs:\nchannel: %s\nhttp:    %s", i, a[i], b[i])
		}
	}
	// Every request but those the follower refused itself (a body it could not decode or
	// found invalid) went to the leader: over the channel where it is enabled, over HTTP in
	// the mixed cluster.
	afterCh, afterHTTP := forwardedVia(t, viaChannel), forwardedVia(t, viaHTTP)
	channel, overHTTP := afterCh["channel"]-beforeCh["channel"], afterHTTP["http"]-beforeHTTP["http"]
	if channel != overHTTP || channel < len(a)-3 {
		t.Errorf("%d of %d requests forwarded over the channel, %d over HTTP in the mixed cluster", channel, len(a), overHTTP)
	}
	if n := afterCh["http"] - beforeCh["http"]; n != 0 {
		t.Errorf("the follower of the cluster with the channel forwarded %d writes over HTTP", n)
	}
	if n := afterHTTP["channel"] - beforeHTTP["channel"]; n != 0 {
		t.Errorf("a follower of the mixed cluster forwarded %d requests over the channel", n)
	}
}

// mixedCluster starts a cluster whose third node lacks the peer channel, as a node of the
// version before it would.
func mixedCluster(t *testing.T) *agent.Dev {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, devOptions(func(c *config.Config) {
		if c.ID == "n3" {
			c.DisableFeatures = []string{string(fsm.FeaturePeerChannel)}
		}
	}))
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	if err := settleFeatures(d, nil, len(fsm.AllFeatures())-1); err != nil {
		t.Fatal(err)
	}
	for i := range d.Size() {
		if d.Agent(i).Node().ChannelEnabled() {
			t.Fatalf("node %d of a cluster with a member without the channel uses it", i)
		}
	}
	return d
}

// forwardScript sends, through the follower ep, writes to sessions and locks of each kind,
// refusals among them, and returns each answer (status, headers but Date, body) with what
// differs between runs taken out.
func forwardScript(t *testing.T, ep string) []string {
	t.Helper()
	var out []string
	var ids []string // the session ids and lock names of this run, in order
	add := func(r response) response {
		t.Helper()
		if r.err != nil {
			t.Fatal(r.err)
		}
		out = append(out, normalizeAnswer(r, ids))
		return r
	}
	sid := func(r response) string {
		t.Helper()
		var s api.Session
		ok(t, r, http.StatusCreated, &s)
		ids = append(ids, s.ID)
		add(r)
		return s.ID
	}
	name := lockName(t)
	sem, rw := name+"-sem", name+"-rw"
	ids = append(ids, sem, rw, name)

	s1 := sid(do(t, http.MethodPost, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "10s", Name: "cmp"}))
	s2 := sid(do(t, http.MethodPost, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "10s", LockDelay: "0s"}))
	add(do(t, http.MethodPost, ep+"/v1/sessions", "{"))
	add(do(t, http.MethodPost, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "-1s"}))
	add(do(t, http.MethodPut, ep+"/v1/sessions/"+s1+"/renew", nil))
	add(do(t, http.MethodPut, ep+"/v1/sessions/0123456789abcdef0123456789abcdef/renew", nil))
	add(do(t, http.MethodPost, ep+"/v1/sessions/renew", api.RenewSessionsRequest{IDs: []string{s1, s2, "0123456789abcdef0123456789abcdef"}}))
	var g api.AcquireResponse
	ok(t, add(do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s1, "", strp("v")))), http.StatusOK, &g)
	add(do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", acquireReq(s2, "", nil)))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", api.AcquireRequest{Session: s2, Wait: "1ms", Attempt: "a-1"}))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+name+"/acquire", api.AcquireRequest{Wait: "nonsense"}))
	wrong := g.Token + 1000
	add(do(t, http.MethodPost, ep+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: s1, Token: &wrong}))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: s2, Token: &g.Token}))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: s1, Token: &g.Token}))
	two, one := 2, 3
	add(do(t, http.MethodPost, ep+"/v1/locks/"+sem+"/acquire", api.AcquireRequest{Session: s1, Limit: &two}))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+sem+"/acquire", api.AcquireRequest{Session: s2, Limit: &one}))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+rw+"/acquire", api.AcquireRequest{Session: s1, Mode: "shared"}))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+rw+"/acquire", api.AcquireRequest{Session: s2, Mode: "shared"}))
	add(do(t, http.MethodPost, ep+"/v1/locks/"+rw+"/acquire", api.AcquireRequest{Session: s2, Mode: "exclusive"}))
	add(do(t, http.MethodDelete, ep+"/v1/sessions/"+s1, nil))
	add(do(t, http.MethodDelete, ep+"/v1/sessions/"+s1, nil))
	add(do(t, http.MethodDelete, ep+"/v1/sessions/"+s2, nil))
	return out
}

var digits = regexp.MustCompile(`[0-9]+`)

// normalizeAnswer writes an answer as one line: status, headers (but Date) sorted, and body,
// with the run's ids and names replaced by their place in ids, then every number but the
// status by N.
func normalizeAnswer(r response, ids []string) string {
	var hs []string
	for k, vs := range r.header {
		if k == "Date" {
			continue
		}
		hs = append(hs, k+": "+strings.Join(vs, ", "))
	}
	slices.Sort(hs)
	s := strings.Join(hs, " | ") + " " + strings.TrimSpace(string(r.body))
	for i := len(ids) - 1; i >= 0; i-- { // the longest names first: they contain the others
		s = strings.ReplaceAll(s, ids[i], fmt.Sprintf("<id-%c>", 'a'+i))
	}
	return strconv.Itoa(r.status) + " " + digits.ReplaceAllString(s, "N")
}

// forwardedVia reads ep's raftlock_http_forwarded_via_total by the way forwards took.
func forwardedVia(t *testing.T, ep string) map[string]int {
	t.Helper()
	m := map[string]int{}
	for _, line := range strings.Split(string(metricsPage(t, ep)), "\n") {
		rest, found := strings.CutPrefix(line, `raftlock_http_forwarded_via_total{via="`)
		if !found {
			continue
		}
		via, num, _ := strings.Cut(rest, `"} `)
		n, err := strconv.ParseFloat(num, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		m[via] = int(n)
	}
	return m
}

// A write in flight over the peer channel when the leader dies gets 503 timeout (its outcome
// is unknown: it reached the leader), never a definite answer; the follower then reaches the
// next leader over a new channel connection.
func TestForwardOverChannelLeaderLost(t *testing.T) {
	d := ownCluster(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	// The channel carries forwards once the cluster enabled it: settled features first.
	if err := settleFeatures(d, nil, len(fsm.AllFeatures())); err != nil {
		t.Fatal(err)
	}
	li, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := d.Endpoints()[li]
	f := d.Endpoints()[(li+1)%d.Size()]
	name := lockName(t)
	holder, waiter := session(t, f), session(t, f)
	mustAcquire(t, f, name, holder, nil)
	before := forwardedVia(t, f)
	wait := goDo(t.Context(), http.MethodPost, f+"/v1/locks/"+name+"/acquire", acquireReq(waiter, "30s", nil))
	waitWaiters(t, leader, name, 1)
	if err := d.Kill(li); err != nil {
		t.Fatal(err)
	}
	apiError(t, await(t, wait, "the waiting acquire"), http.StatusServiceUnavailable, api.CodeTimeout)
	if n := forwardedVia(t, f)["channel"] - before["channel"]; n != 1 {
		t.Fatalf("%d requests forwarded over the channel, want the waiting acquire", n)
	}
	if err := settleFeatures(d, nil, len(fsm.AllFeatures())); err != nil {
		t.Fatal(err)
	}
	var next string
	eventually(t, "a write through a follower of the new leader", func() string {
		li, err := d.WaitLeader(ctx)
		if err != nil {
			return err.Error()
		}
		for i, ep := range d.Endpoints() {
			if i != li && d.Agent(i) != nil {
				next = ep
			}
		}
		if next == "" {
			return "no follower running"
		}
		return ""
	})
	before = forwardedVia(t, next)
	createSession(t, next, api.CreateSessionRequest{TTL: "10s"})
	if n := forwardedVia(t, next)["channel"] - before["channel"]; n != 1 {
		t.Fatalf("%d requests forwarded over the channel to the new leader, want 1", n)
	}
}

// Under --acl the leader judges each forwarded request's token, over the channel as over
// HTTP: the same writes by a token allowed one prefix, a lock outside it, a token nobody
// created and a request without one get the same answers through a follower of a cluster
// with the channel as through one of a mixed cluster.
func TestForwardOverChannelJudgesTokensAsHTTP(t *testing.T) {
	d := aclShared.Get(t)
	mixed, mixedRoot := mixedACLCluster(t)
	_, followers := roles(t, d)
	viaChannel := followers[0]
	_, followers = roles(t, mixed)
	var viaHTTP string
	for _, f := range followers {
		if f != mixed.Endpoints()[2] {
			viaHTTP = f
		}
	}
	beforeCh := forwardedVia(t, viaChannel)
	a := aclForwardScript(t, viaChannel, aclRoot)
	b := aclForwardScript(t, viaHTTP, mixedRoot)

	if len(a) != len(b) {
		t.Fatalf("%d answers through the channel, %d over HTTP", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("answer %d differs:\nchannel: %s\nhttp:    %s", i, a[i], b[i])
		}
	}
	if n := forwardedVia(t, viaChannel)["channel"] - beforeCh["channel"]; n < 4 {
		t.Errorf("%d of the writes forwarded over the channel", n)
	}
}

// mixedACLCluster starts a cluster with --acl whose third node lacks the peer channel, and
// returns it with its management token's secret.
func mixedACLCluster(t *testing.T) (*agent.Dev, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := agent.StartDev(ctx, devOptions(func(c *config.Config) {
		c.ACL = true
		if c.ID == "n3" {
			c.DisableFeatures = []string{string(fsm.FeaturePeerChannel)}
		}
	}))
	if err != nil {
		t.Fatalf("starting a cluster: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	leader, _ := roles(t, d)
	var boot api.BootstrapResponse
	ok(t, do(t, http.MethodPost, leader+"/v1/acl/bootstrap", nil), http.StatusOK, &boot)
	if err := settleFeatures(d, as(boot.SecretID), len(fsm.AllFeatures())-1); err != nil {
		t.Fatal(err)
	}
	return d, boot.SecretID
}

// aclForwardScript sends writes through the follower ep as a token allowed to write under one
// prefix, and returns the answers as forwardScript does.
func aclForwardScript(t *testing.T, ep, root string) []string {
	t.Helper()
	name := lockName(t)
	policy := uniqueName(t)
	var p api.Policy
	ok(t, doAs(t, root, http.MethodPost, ep+"/v1/acl/policies", api.Policy{Name: policy, Locks: []api.LockRule{rule(name+"/", "write")}}), http.StatusOK, &p)
	var tok api.NewToken
	ok(t, doAs(t, root, http.MethodPost, ep+"/v1/acl/tokens", api.CreateTokenRequest{Description: "cmp", Policies: []string{policy}}), http.StatusOK, &tok)
	// The follower knows the token before it is used, so that it sends its writes on at once
	// rather than asking the leader about the token first.
	eventually(t, "the follower knows the token", func() string {
		if r := doAs(t, tok.SecretID, http.MethodGet, ep+"/v1/acl/token/self?consistency=stale", nil); r.status != http.StatusOK {
			return fmt.Sprintf("%d", r.status)
		}
		return ""
	})
	ids := []string{tok.SecretID, tok.AccessorID, policy, "other-" + name, name}
	var out []string
	add := func(r response) response {
		t.Helper()
		if r.err != nil {
			t.Fatal(r.err)
		}
		out = append(out, normalizeAnswer(r, ids))
		return r
	}
	var s api.Session
	r := doAs(t, tok.SecretID, http.MethodPost, ep+"/v1/sessions", api.CreateSessionRequest{TTL: "10s"})
	ok(t, r, http.StatusCreated, &s)
	ids = append(ids, s.ID)
	add(r)
	var g api.AcquireResponse
	ok(t, add(doAs(t, tok.SecretID, http.MethodPost, ep+"/v1/locks/"+name+"/a/acquire", acquireReq(s.ID, "", nil))), http.StatusOK, &g)
	add(doAs(t, tok.SecretID, http.MethodPost, ep+"/v1/locks/other-"+name+"/acquire", acquireReq(s.ID, "", nil)))
	add(doAs(t, "00000000-0000-4000-8000-000000000000", http.MethodPost, ep+"/v1/locks/"+name+"/a/acquire", acquireReq(s.ID, "", nil)))
	add(rawDo(http.MethodPost, ep+"/v1/locks/"+name+"/a/release", api.ReleaseRequest{Session: s.ID, Token: &g.Token}, nil))
	add(doAs(t, root, http.MethodPut, ep+"/v1/sessions/"+s.ID+"/renew", nil))
	add(doAs(t, tok.SecretID, http.MethodPost, ep+"/v1/locks/"+name+"/a/release", api.ReleaseRequest{Session: s.ID, Token: &g.Token}))
	add(doAs(t, tok.SecretID, http.MethodDelete, ep+"/v1/sessions/"+s.ID, nil))
	return out
}

// A second server on a node (a test's, an embedding's console) does not take the peer
// channel from the node's own server, nor end its serving when it closes: the leader still
// answers its followers' forwards over the channel.
func TestSecondServerLeavesTheChannelToTheFirst(t *testing.T) {
	d := sharedCluster(t)
	if err := settleFeatures(d, nil, len(fsm.AllFeatures())); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	li, err := d.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := httpapi.New(d.Agent(li).Node(), httpapi.Config{})
	second.Close()
	f := d.Endpoints()[(li+1)%d.Size()]
	before := forwardedVia(t, f)
	session(t, f)
	if after := forwardedVia(t, f); after["channel"]-before["channel"] != 1 || after["http"] != before["http"] {
		t.Errorf("the session's creation went %v, want once over the channel",
			map[string]int{"channel": after["channel"] - before["channel"], "http": after["http"] - before["http"]})
	}
}
