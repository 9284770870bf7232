package httpapi_test

import (
	"encoding/json"
	"fmt"
	"mime"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
	"github.com/raftlock/raftlock/internal/version"
)

func TestClusterView(t *testing.T) {
	d := sharedCluster(t)
	li, _ := d.WaitLeader(t.Context())
	leaderID := d.Agent(li).Node().ID()
	for i, ep := range d.Endpoints() {
		for _, q := range []string{"", "?consistency=stale"} {
			r := do(t, http.MethodGet, ep+"/v1/cluster"+q, nil)
			ok(t, r, http.StatusOK, nil)
			hasKeys(t, fields(t, r.body), "version", "leader", "term", "commit_index", "applied_index", "members", "log_store", "features")
			// The leader adds what each member reported of itself; a follower's stale read
			// has no reports.
			reports := q == "" || d.Agent(i).Node().ID() == leaderID
			for _, raw := range rawList(t, r.body, "members") {
				if reports {
					hasKeys(t, fields(t, raw), "id", "raft_addr", "http_addr", "suffrage", "leader", "version", "features", "applied_index", "lag")
				} else {
					hasKeys(t, fields(t, raw), "id", "raft_addr", "http_addr", "suffrage", "leader")
				}
			}
			var c api.Cluster
			if err := json.Unmarshal(r.body, &c); err != nil {
				t.Fatal(err)
			}
			if c.Version != version.Version || c.Leader != leaderID || c.Term == 0 || c.CommitIndex == 0 || c.AppliedIndex == 0 || c.LogStore != "wal" ||
				len(c.Features) != len(fsm.AllFeatures()) {
				t.Fatalf("cluster via node %d: %s", i, r.body)
			}
			for _, m := range c.Members {
				if reports && (m.Version != version.Version || len(m.Features) != len(fsm.AllFeatures())) {
					t.Fatalf("member %s reported %q %v", m.ID, m.Version, m.Features)
				}
			}
			checkMembers(t, d, c.Members, leaderID)
		}
	}
}

// checkMembers checks the member list against the dev cluster: every node, with its advertised
// (never wildcard) addresses, as a voter, and the leader flagged.
func checkMembers(t *testing.T, d *agent.Dev, ms []api.Member, leaderID string) {
	t.Helper()
	if len(ms) != d.Size() {
		t.Fatalf("%d members, want %d: %+v", len(ms), d.Size(), ms)
	}
	leaders := 0
	for _, m := range ms {
		var a *agent.Agent
		for i := range d.Size() {
			if ag := d.Agent(i); ag != nil && ag.Node().ID() == m.ID {
				a = ag
			}
		}
		if a == nil {
			t.Fatalf("unknown member %+v", m)
		}
		if m.HTTPAddr != a.HTTPAddr() || m.Suffrage != "voter" || m.Leader != (m.ID == leaderID) {
			t.Fatalf("member %+v; node serves HTTP on %s, leader is %s", m, a.HTTPAddr(), leaderID)
		}
		for _, addr := range []string{m.RaftAddr, m.HTTPAddr} {
			host, port, err := net.SplitHostPort(addr)
			if err != nil || port == "0" || host == "" || net.ParseIP(host) == nil || net.ParseIP(host).IsUnspecified() {
				t.Fatalf("member %s advertises %q", m.ID, addr)
			}
		}
		if m.Leader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Fatalf("%d members flagged leader: %+v", leaders, ms)
	}
}

func TestResponseHeaders(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	li, _ := d.WaitLeader(t.Context())
	leaderID := d.Agent(li).Node().ID()
	s := session(t, leader)
	name := lockName(t)
	g := mustAcquire(t, leader, name, s, nil)
	for _, ep := range append([]string{leader}, followers...) {
		// atLeader: the request is executed by the leader (forwarded from a follower), whose
		// applied index covers the grant above.
		for _, c := range []struct {
			method, path string
			body         any
			status       int
			atLeader     bool
		}{
			{"GET", "/v1/locks/" + name, nil, 200, true},                                               // linearizable read
			{"GET", "/v1/locks/" + name + "?consistency=stale", nil, 200, ep == leader},                // local read
			{"POST", "/v1/sessions", api.CreateSessionRequest{TTL: "10s"}, 201, true},                  // write
			{"PUT", "/v1/sessions/" + s + "/renew", nil, 200, true},                                    // renewal
			{"POST", "/v1/locks/" + name + "/acquire", acquireReq(session(t, ep), "", nil), 409, true}, // business error
			{"GET", "/v1/sessions/0123456789abcdef0123456789abcdef", nil, 404, true},                   // not found
			{"POST", "/v1/sessions", `{"ttl":"1s"}`, 400, ep == leader},                                // refused at the edge
			{"GET", "/v1/nope", nil, 404, ep == leader},                                                // no route
			{"GET", "/v1/health", nil, 200, ep == leader},
			{"GET", "/v1/cluster", nil, 200, true},
		} {
			r := do(t, c.method, ep+c.path, c.body)
			if r.status != c.status {
				t.Fatalf("%s %s via %s: %d %s", c.method, c.path, ep, r.status, r.body)
			}
			checkJSONType(t, r)
			if idx := indexHeader(t, r); c.atLeader && idx < g.Token {
				t.Fatalf("%s %s via %s: %s %d is below an index applied earlier (%d)", c.method, c.path, ep, api.HeaderIndex, idx, g.Token)
			}
			if got := r.header.Get(api.HeaderLeader); got != leaderID {
				t.Fatalf("%s %s via %s: %s %q, want %q", c.method, c.path, ep, api.HeaderLeader, got, leaderID)
			}
		}
	}
}

func TestFollowerForwardsWrites(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	for _, f := range followers {
		r := do(t, http.MethodPost, f+"/v1/sessions", api.CreateSessionRequest{TTL: "10s", Name: "via-follower"})
		var s api.Session
		ok(t, r, http.StatusCreated, &s)
		// The answer is the leader's: its index covers the new session.
		if idx := indexHeader(t, r); idx < s.CreatedIndex {
			t.Fatalf("forwarded create: %s %d below created_index %d", api.HeaderIndex, idx, s.CreatedIndex)
		}
		// The leader has it without any read barrier.
		var got api.SessionInfo
		ok(t, do(t, http.MethodGet, leader+"/v1/sessions/"+s.ID+"?consistency=stale", nil), http.StatusOK, &got)
		if got.Name != "via-follower" {
			t.Fatalf("session %+v", got)
		}
		name := lockName(t)
		g := mustAcquire(t, f, name, s.ID, strp("f"))
		if l := getLock(t, leader, name, "?consistency=stale"); l.Token != g.Token || l.Session != s.ID {
			t.Fatalf("leader's lock %+v after an acquire through a follower: %+v", l, g)
		}
		release(t, f, name, s.ID, g.Token)
		ok(t, do(t, http.MethodDelete, f+"/v1/sessions/"+s.ID, nil), http.StatusOK, nil)
	}
}

// A follower passes request bodies and answers on whole, however large: values of the largest
// size go in through each follower, and a linearizable list of them, far larger than the
// forwarder's copy buffer, comes back through each follower as the leader gives it.
func TestFollowerForwardsWholeBodies(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	prefix := lockName(t) + "/"
	var want []api.Lock
	for i, f := range followers {
		sid := session(t, f)
		for j := range 20 {
			name := fmt.Sprintf("%s%d-%02d", prefix, i, j)
			value := strings.Repeat(string(rune('a'+j)), 4096) // the default largest value
			g := mustAcquire(t, f, name, sid, &value)
			want = append(want, api.Lock{Name: name, Held: true, Session: sid, Token: g.Token, Value: value})
		}
	}
	var fromLeader api.LockList
	ok(t, do(t, http.MethodGet, leader+"/v1/locks?prefix="+prefix, nil), http.StatusOK, &fromLeader)
	for _, f := range followers {
		r := do(t, http.MethodGet, f+"/v1/locks?prefix="+prefix, nil)
		var got api.LockList
		ok(t, r, http.StatusOK, &got)
		if len(r.body) < 40*4096 {
			t.Fatalf("a list of %d bytes through %s", len(r.body), f)
		}
		if len(got.Locks) != len(want) || len(fromLeader.Locks) != len(want) {
			t.Fatalf("%d locks through %s and %d from the leader, want %d", len(got.Locks), f, len(fromLeader.Locks), len(want))
		}
		for i, w := range want {
			g, l := got.Locks[i], fromLeader.Locks[i]
			if g.Name != w.Name || g.Session != w.Session || g.Token != w.Token || g.Value != w.Value || !g.Held || !reflect.DeepEqual(g, l) {
				t.Fatalf("lock %d through %s: %s (held %v, token %d, value of %d bytes), want %s token %d; leader says %s token %d",
					i, f, g.Name, g.Held, g.Token, len(g.Value), w.Name, w.Token, l.Name, l.Token)
			}
		}
	}
}

func TestHealthAndReady(t *testing.T) {
	d := sharedCluster(t)
	for _, ep := range d.Endpoints() {
		for _, path := range []string{"/v1/health", "/v1/ready"} {
			r := do(t, http.MethodGet, ep+path, nil)
			ok(t, r, http.StatusOK, nil)
			fields(t, r.body)
		}
	}
}

// The leader's /v1/health says whether its feature gate has settled (every member heard
// from, everything they all support enabled); a follower's, which does not ask the members,
// leaves it out.
func TestHealthSaysWhetherTheFeatureGateSettled(t *testing.T) {
	d := sharedCluster(t)
	testkit.Eventually(t, deadline, "the leader's gate to settle", func() bool {
		leader, _ := roles(t, d)
		var h api.Health
		r := do(t, http.MethodGet, leader+"/v1/health", nil)
		return r.status == http.StatusOK && json.Unmarshal(r.body, &h) == nil && h.FeatureGate == "settled"
	})
	_, followers := roles(t, d)
	for _, ep := range followers {
		var h api.Health
		ok(t, do(t, http.MethodGet, ep+"/v1/health", nil), http.StatusOK, &h)
		if leader, _ := roles(t, d); h.FeatureGate != "" && leader != ep {
			t.Fatalf("follower %s says feature_gate %q", ep, h.FeatureGate)
		}
	}
}

// TestReadyUnderWrites asks every node for readiness while the leader commits a stream of
// grants and releases: entries commit while earlier ones apply, and a node that keeps up must
// still answer ready.
func TestReadyUnderWrites(t *testing.T) {
	d := sharedCluster(t)
	leader, _ := roles(t, d)
	s := session(t, leader)
	stop := make(chan struct{})
	var writes sync.WaitGroup
	for w := range 4 {
		name := lockName(t) + "-" + strconv.Itoa(w)
		writes.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Each command is a write; whether it is granted or released does not matter here.
				var g api.AcquireResponse
				r := rawDo(http.MethodPost, leader+"/v1/locks/"+name+"/acquire", acquireReq(s, "", nil), nil)
				if r.err != nil || r.status != http.StatusOK || json.Unmarshal(r.body, &g) != nil {
					t.Errorf("acquire during the readiness test: %v %d %s", r.err, r.status, r.body)
					return
				}
				r = rawDo(http.MethodPost, leader+"/v1/locks/"+name+"/release", api.ReleaseRequest{Session: s, Token: &g.Token}, nil)
				if r.err != nil || r.status != http.StatusOK {
					t.Errorf("release during the readiness test: %v %d %s", r.err, r.status, r.body)
					return
				}
			}
		})
	}
	defer writes.Wait()
	defer close(stop)
	for range 200 {
		for _, ep := range d.Endpoints() {
			if r := do(t, http.MethodGet, ep+"/v1/ready", nil); r.status != http.StatusOK {
				t.Fatalf("%s not ready while it keeps up with the writes: %d %s", ep, r.status, r.body)
			}
		}
	}
}

func TestMetrics(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := session(t, leader)
	mustAcquire(t, leader, lockName(t), s, nil)
	for _, ep := range append([]string{leader}, followers...) {
		r := do(t, http.MethodGet, ep+"/metrics", nil)
		if r.status != http.StatusOK {
			t.Fatalf("/metrics: %d %s", r.status, r.body)
		}
		mt, params, err := mime.ParseMediaType(r.header.Get("Content-Type"))
		if err != nil || mt != "text/plain" || !strings.HasPrefix(params["version"], "0.0.") {
			t.Fatalf("/metrics Content-Type %q", r.header.Get("Content-Type"))
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(strings.NewReader(string(r.body)))
		if err != nil {
			t.Fatalf("/metrics is not Prometheus text: %v", err)
		}
		for _, name := range []string{
			"raftlock_raft_leader", "raftlock_raft_term", "raftlock_raft_commit_index", "raftlock_raft_applied_index",
			"raftlock_sessions", "raftlock_locks_held", "raftlock_waiters", "raftlock_grants_total",
			"raftlock_releases_total", "raftlock_session_expiries_total", "raftlock_http_request_duration_seconds",
			"raftlock_http_forwarded_requests_total",
		} {
			if families[name] == nil {
				t.Fatalf("/metrics of %s lacks %s", ep, name)
			}
		}
		gauge := func(name string) float64 { return families[name].GetMetric()[0].GetGauge().GetValue() }
		if want := map[bool]float64{true: 1, false: 0}[ep == leader]; gauge("raftlock_raft_leader") != want {
			t.Fatalf("raftlock_raft_leader of %s = %v", ep, gauge("raftlock_raft_leader"))
		}
		if gauge("raftlock_sessions") < 1 || gauge("raftlock_raft_term") < 1 {
			t.Fatalf("gauges of %s: sessions %v term %v", ep, gauge("raftlock_sessions"), gauge("raftlock_raft_term"))
		}
		if ep == leader && gauge("raftlock_locks_held") < 1 {
			t.Fatalf("raftlock_locks_held = %v with a lock held", gauge("raftlock_locks_held"))
		}
	}
}

func TestAddExistingMemberIsNoop(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	var before api.Cluster
	ok(t, do(t, http.MethodGet, leader+"/v1/cluster", nil), http.StatusOK, &before)
	for _, ep := range []string{leader, followers[0]} {
		for _, m := range before.Members {
			r := do(t, http.MethodPost, ep+"/v1/cluster/members", api.AddMemberRequest{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr})
			ok(t, r, http.StatusOK, nil)
			hasKeys(t, fields(t, r.body), "members")
			var mr api.MembersResponse
			if err := json.Unmarshal(r.body, &mr); err != nil {
				t.Fatal(err)
			}
			if membership(mr.Members) != membership(before.Members) {
				t.Fatalf("adding existing member %s changed the members: %+v, before %+v", m.ID, mr.Members, before.Members)
			}
		}
	}
	var after api.Cluster
	ok(t, do(t, http.MethodGet, followers[1]+"/v1/cluster", nil), http.StatusOK, &after)
	if membership(after.Members) != membership(before.Members) || after.Leader != before.Leader {
		t.Fatalf("cluster after no-op adds %+v, before %+v", after, before)
	}
	// Missing or malformed fields are refused.
	for _, body := range []string{`{}`, `{"id":"n9","raft_addr":"127.0.0.1:1"}`, `{"id":"n9","raft_addr":"nope","http_addr":"127.0.0.1:2"}`, `{"id":"","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`} {
		apiError(t, do(t, http.MethodPost, leader+"/v1/cluster/members", body), http.StatusBadRequest, api.CodeInvalidArgument)
	}
}

// Adding a member under an existing id with other addresses, or at an address another member
// has, is a definite refusal (409 member_conflict) that changes nothing: before, the first
// moved voter n2 to an address where nothing listens, and the second made the process at
// n2's address vote as the new id, both answered 200.
func TestAddConflictingMemberIsRefused(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	var before api.Cluster
	ok(t, do(t, http.MethodGet, leader+"/v1/cluster", nil), http.StatusOK, &before)
	m := before.Members[1]
	other := before.Members[2]
	for _, ep := range []string{leader, followers[0]} {
		for _, req := range []api.AddMemberRequest{
			{ID: m.ID, RaftAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2"}, // its id elsewhere
			{ID: m.ID, RaftAddr: "127.0.0.1:1", HTTPAddr: m.HTTPAddr},    // its id at another Raft address
			{ID: "n9", RaftAddr: m.RaftAddr, HTTPAddr: "127.0.0.1:2"},    // its Raft address under another id
			{ID: "n9", RaftAddr: m.RaftAddr, HTTPAddr: m.HTTPAddr, Suffrage: "nonvoter"},
			{ID: "n9", RaftAddr: "127.0.0.1:1", HTTPAddr: other.HTTPAddr}, // another's HTTP address
			{ID: m.ID, RaftAddr: m.RaftAddr, HTTPAddr: other.HTTPAddr},    // its own, with another's HTTP address
		} {
			apiError(t, do(t, http.MethodPost, ep+"/v1/cluster/members", req), http.StatusConflict, api.CodeMemberConflict)
		}
	}
	var after api.Cluster
	ok(t, do(t, http.MethodGet, followers[1]+"/v1/cluster", nil), http.StatusOK, &after)
	if membership(after.Members) != membership(before.Members) {
		t.Fatalf("members after refused adds %+v, before %+v", after.Members, before.Members)
	}
	for i, x := range after.Members {
		if x.HTTPAddr != before.Members[i].HTTPAddr {
			t.Fatalf("member %s's HTTP address changed: %s, before %s", x.ID, x.HTTPAddr, before.Members[i].HTTPAddr)
		}
	}
}

func TestRemoveUnknownMember(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	for _, ep := range []string{leader, followers[0]} {
		apiError(t, do(t, http.MethodDelete, ep+"/v1/cluster/members/n9", nil), http.StatusNotFound, api.CodeNotFound)
	}
	var c api.Cluster
	ok(t, do(t, http.MethodGet, leader+"/v1/cluster", nil), http.StatusOK, &c)
	if len(c.Members) != d.Size() {
		t.Fatalf("members %+v", c.Members)
	}
}

func TestRemoveMember(t *testing.T) {
	t.Parallel()
	d := ownCluster(t, nil)
	leader, followers := roles(t, d)
	var before api.Cluster
	ok(t, do(t, http.MethodGet, leader+"/v1/cluster", nil), http.StatusOK, &before)
	li, _ := d.WaitLeader(t.Context())
	var gone string
	for i := range d.Size() {
		if i != li {
			gone = d.Agent(i).Node().ID()
			break
		}
	}
	r := do(t, http.MethodDelete, followers[1]+"/v1/cluster/members/"+gone, nil)
	var mr api.MembersResponse
	ok(t, r, http.StatusOK, &mr)
	if len(mr.Members) != 2 {
		t.Fatalf("members after removing %s: %+v", gone, mr.Members)
	}
	for _, m := range mr.Members {
		if m.ID == gone {
			t.Fatalf("removed member %s still listed: %+v", gone, mr.Members)
		}
	}
	apiError(t, do(t, http.MethodDelete, leader+"/v1/cluster/members/"+gone, nil), http.StatusNotFound, api.CodeNotFound)
	for i := range d.Size() {
		if a := d.Agent(i); a != nil && a.Node().ID() == gone {
			if err := d.Kill(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The two left still commit writes.
	session(t, leader)
}

func TestLeadershipTransfer(t *testing.T) {
	d := sharedCluster(t)
	t.Cleanup(func() {
		if err := settle(d); err != nil {
			t.Error(err)
		}
	})
	for _, target := range []string{"explicit", ""} {
		li, err := d.WaitLeader(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		old := d.Agent(li).Node().ID()
		body := any(nil)
		want := ""
		if target != "" {
			want = d.Agent((li + 1) % d.Size()).Node().ID()
			body = api.TransferRequest{ID: want}
		}
		// Sent to a follower: forwarded to the leader, which hands over.
		r := do(t, http.MethodPost, d.Endpoints()[(li+2)%d.Size()]+"/v1/cluster/leadership-transfer", body)
		ok(t, r, http.StatusOK, nil)
		eventually(t, "the new leader", func() string {
			var c api.Cluster
			r := do(t, http.MethodGet, d.Endpoints()[li]+"/v1/cluster?consistency=stale", nil)
			if r.status != http.StatusOK || json.Unmarshal(r.body, &c) != nil {
				return fmt.Sprintf("%d %s", r.status, r.body)
			}
			if c.Leader == "" || c.Leader == old || want != "" && c.Leader != want {
				return fmt.Sprintf("leader %q (was %s, want %q)", c.Leader, old, want)
			}
			return ""
		})
		if err := settle(d); err != nil {
			t.Fatal(err)
		}
	}
	li, _ := d.WaitLeader(t.Context())
	apiError(t, do(t, http.MethodPost, d.Endpoints()[li]+"/v1/cluster/leadership-transfer", api.TransferRequest{ID: "n9"}), http.StatusNotFound, api.CodeNotFound)
}

func TestStaleReadsOnEveryGET(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	s := session(t, leader)
	name := lockName(t)
	g := mustAcquire(t, leader, name, s, nil)
	for _, path := range []string{
		"/v1/sessions/" + s,
		"/v1/sessions",
		"/v1/locks/" + name,
		"/v1/locks?prefix=" + name,
		"/v1/locks/" + name + "/check?token=" + fmt.Sprint(g.Token),
		"/v1/cluster",
	} {
		// A follower answers from its own state, which catches up with the leader's.
		eventually(t, "stale GET "+path, func() string {
			r := do(t, http.MethodGet, followers[0]+path+sep(path)+"consistency=stale", nil)
			if r.status != http.StatusOK {
				return fmt.Sprintf("%d %s", r.status, short(r.body))
			}
			checkJSONType(t, r)
			if !strings.Contains(string(r.body), s) && !strings.Contains(path, "check") && path != "/v1/cluster" {
				return "not caught up: " + short(r.body)
			}
			return ""
		})
	}
}

// sep returns the separator that appends a query parameter to path.
func sep(path string) string {
	if strings.Contains(path, "?") {
		return "&"
	}
	return "?"
}

// membership describes who the members are, leaving out what they report of themselves
// (applied index and lag change all the time).
func membership(ms []api.Member) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%s %s %s %s %t %s;", m.ID, m.RaftAddr, m.HTTPAddr, m.Suffrage, m.Leader, m.Version)
	}
	return b.String()
}

// GET /v1/health?member=ID adds what the node's own state says of the member: a node whose
// data directory was lost asks it before it bootstraps or joins under its old id.
func TestHealthMemberView(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	var c api.Cluster
	ok(t, do(t, http.MethodGet, leader+"/v1/cluster", nil), http.StatusOK, &c)
	id := c.Members[0].ID
	for _, ep := range []string{leader, followers[0]} {
		var h api.Health
		ok(t, do(t, http.MethodGet, ep+"/v1/health?member="+id, nil), http.StatusOK, &h)
		if h.Member == nil || *h.Member != (api.MemberView{ID: id, Suffrage: api.SuffrageVoter, Started: true}) {
			t.Fatalf("%s's view of %s: %+v", ep, id, h.Member)
		}
		var stranger api.Health
		ok(t, do(t, http.MethodGet, ep+"/v1/health?member=nobody", nil), http.StatusOK, &stranger)
		if stranger.Member == nil || *stranger.Member != (api.MemberView{ID: "nobody"}) {
			t.Fatalf("%s's view of a stranger: %+v", ep, stranger.Member)
		}
		var plain api.Health
		ok(t, do(t, http.MethodGet, ep+"/v1/health", nil), http.StatusOK, &plain)
		if plain.Member != nil {
			t.Fatalf("%s's health without ?member has a member view: %+v", ep, plain.Member)
		}
	}
}
