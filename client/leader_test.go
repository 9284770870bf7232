package client_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/config"
)

// scrape reads the metrics of the node at endpoint.
func scrape(t *testing.T, endpoint string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(endpoint + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics is not Prometheus text: %v", endpoint, err)
	}
	return families
}

// forwardedCount reads raftlock_http_forwarded_requests_total from the node at endpoint.
func forwardedCount(t *testing.T, endpoint string) int {
	t.Helper()
	f := scrape(t, endpoint)["raftlock_http_forwarded_requests_total"]
	if f == nil {
		t.Fatalf("%s/metrics has no raftlock_http_forwarded_requests_total", endpoint)
	}
	return int(f.GetMetric()[0].GetCounter().GetValue())
}

// servedCount returns how many GET requests of route the node at endpoint answered.
func servedCount(t *testing.T, endpoint, route string) int {
	t.Helper()
	f := scrape(t, endpoint)["raftlock_http_request_duration_seconds"]
	if f == nil {
		t.Fatalf("%s/metrics has no raftlock_http_request_duration_seconds", endpoint)
	}
	n := 0
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["route"] == route && labels["method"] == http.MethodGet {
			n += int(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

// forwardedBy sums the forwarded requests of the nodes at endpoints, skipping skip.
func forwardedBy(t *testing.T, endpoints []string, skip string) int {
	n := 0
	for _, ep := range endpoints {
		if ep != skip {
			n += forwardedCount(t, ep)
		}
	}
	return n
}

// followersFirst returns the cluster's endpoints with the leader's last, and the leader's.
func followersFirst(ctx context.Context, t *testing.T, dev *agent.Dev) ([]string, string) {
	t.Helper()
	leader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eps := dev.Endpoints()
	lead := eps[leader]
	eps = slices.DeleteFunc(slices.Clone(eps), func(s string) bool { return s == lead })
	return append(eps, lead), lead
}

// settles makes requests with do until n in a row were not forwarded by any node of
// endpoints but skip, and fails if that takes more than limit requests.
func settles(t *testing.T, do func() error, endpoints []string, skip string, n, limit int) {
	t.Helper()
	run := 0
	for i := 0; run < n; i++ {
		if i == limit {
			t.Fatalf("after %d requests the client still reaches the leader through a follower", limit)
		}
		before := forwardedBy(t, endpoints, skip)
		if err := do(); err != nil {
			t.Fatal(err)
		}
		if forwardedBy(t, endpoints, skip) == before {
			run++
		} else {
			run = 0
		}
	}
}

// clusterRead is a linearizable read, which a follower forwards to the leader.
func clusterRead(ctx context.Context, c *client.Client) func() error {
	return func() error { _, err := c.Raw().Cluster(ctx); return err }
}

func TestClientMovesToTheLeader(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	dev := ownCluster(t)
	eps, lead := followersFirst(ctx, t, dev)

	// Listed first, a follower gets the first requests and forwards them; its answers name
	// the leader, and once the client has asked its endpoints which node each is, requests go
	// to the leader itself.
	c := newClient(t, eps)
	settles(t, clusterRead(ctx, c), eps, lead, 20, 200)

	// Without leader routing the client stays where it was told, and pays the hop each time.
	stay := newClient(t, eps, client.WithoutLeaderRouting())
	before := forwardedBy(t, eps, lead)
	for range 20 {
		if err := clusterRead(ctx, stay)(); err != nil {
			t.Fatal(err)
		}
	}
	if got := forwardedBy(t, eps, lead) - before; got != 20 {
		t.Fatalf("followers forwarded %d of 20 requests of a client without leader routing, want 20", got)
	}

	// When the leader dies, the client fails over to a follower, which names the new leader;
	// then requests go to the new leader again.
	crashLeader(ctx, t, dev)
	newLeader, err := dev.WaitLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	live := slices.DeleteFunc(slices.Clone(eps), func(s string) bool { return s == lead })
	settles(t, clusterRead(ctx, c), live, dev.Endpoints()[newLeader], 20, 200)
}

// Under ACLs, a token that may not read the cluster's members still finds the leader: nodes
// say who they are without a token.
func TestClientMovesToTheLeaderUnderACL(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	dev, err := agent.StartDev(ctx, agent.DevOptions{Tune: func(c *config.Config) { c.ACL = true }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	eps, lead := followersFirst(ctx, t, dev)
	boot, err := newClient(t, eps).Raw().ACLBootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := newClient(t, eps, client.WithToken(boot.SecretID))
	if _, err := admin.Raw().CreatePolicy(ctx, api.Policy{Name: "jobs", Locks: []api.LockRule{{Prefix: "jobs/", Access: "write"}}}); err != nil {
		t.Fatal(err)
	}
	tok, err := admin.Raw().CreateToken(ctx, api.CreateTokenRequest{Policies: []string{"jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	worker := newClient(t, eps, client.WithToken(tok.SecretID))
	if _, err := worker.Raw().Cluster(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("the worker's token reads the cluster (%v); the test needs one that may not", err)
	}
	settles(t, func() error { _, err := worker.GetLock(ctx, "jobs/a"); return err }, eps, lead, 20, 200)
}

// Stale reads stay on the first endpoint given, which any node can answer, instead of following
// writes to the leader; after that endpoint fails they move to the next one.
func TestStaleReadsStayOffTheLeader(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	dev := ownCluster(t)
	eps, lead := followersFirst(ctx, t, dev)
	c := newClient(t, eps)
	settles(t, clusterRead(ctx, c), eps, lead, 5, 200) // the client now sends to the leader

	// staleReads makes n stale reads and returns how many each node of watch answered.
	staleReads := func(watch []string, n int) []int {
		t.Helper()
		before := make([]int, len(watch))
		for i, ep := range watch {
			before[i] = servedCount(t, ep, "/v1/locks")
		}
		for range n {
			if _, err := c.Raw().Locks(ctx, "", client.Stale()); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]int, len(watch))
		for i, ep := range watch {
			got[i] = servedCount(t, ep, "/v1/locks") - before[i]
		}
		return got
	}
	if got := staleReads(eps, 20); !slices.Equal(got, []int{20, 0, 0}) {
		t.Fatalf("20 stale reads were answered %v by the endpoints %v; want all by the first, a follower", got, eps)
	}
	// Linearizable reads still go to the leader.
	settles(t, clusterRead(ctx, c), eps, lead, 5, 5)

	// With the first endpoint's node down, stale reads move to the next, and stay there.
	first := slices.Index(dev.Endpoints(), eps[0])
	if err := dev.Kill(first); err != nil {
		t.Fatal(err)
	}
	if got := staleReads(eps[1:], 20); !slices.Equal(got, []int{20, 0}) {
		t.Fatalf("with the first endpoint down, 20 stale reads were answered %v by %v; want all by the first live one", got, eps[1:])
	}
}

// Leader routing follows an answer's X-Raftlock-Leader only when the answering node could know
// who leads: a stale read, or an error given before the request reached the leader, names only
// what that node believes, which may be a deposed leader (and writes moved there would be
// answered from its stale state).
func TestLeaderHintsOnlyFromAnswersThatCouldKnow(t *testing.T) {
	// node 1 answers reads and 400s naming n2 as the leader; n2's answers name n2 too.
	ids := []string{"n1", "n2"}
	var nodes []*fakeNode
	for i := range ids {
		nodes = append(nodes, newFakeNode(t, func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set(api.HeaderLeader, "n2")
			switch {
			case r.URL.Path == "/v1/health":
				writeJSON(w, http.StatusOK, api.Health{Status: "ok", ID: ids[i]})
			case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/locks/"):
				writeJSON(w, http.StatusOK, api.Lock{Name: "l"})
			case r.URL.Path == "/v1/sessions":
				writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, "refused here", nil)
			case isLockAction(r, "release"):
				writeJSON(w, http.StatusOK, api.ReleaseResponse{Released: true})
			default:
				return false
			}
			return true
		}))
	}
	c, err := client.New([]string{nodes[0].URL(), nodes[1].URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx := testCtx(t, 10*time.Second)
	for range 3 {
		if _, err := c.GetLock(ctx, "l", client.Stale()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: "10s"}); !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("create: %v", err)
		}
	}
	if n := nodes[1].count("GET /v1/health"); n != 0 {
		t.Fatalf("a stale read or a refusal moved the client: n2 was asked who it is %d times", n)
	}
	// A write the leader answered is a hint the client follows.
	if err := c.Raw().Release(ctx, "l", "s", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the client to look the leader up", func() bool { return nodes[1].count("GET /v1/health") > 0 })
}
