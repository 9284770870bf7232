package httpapi_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
)

// A token may have at most --max-watches-per-token blocking queries waiting on the node that
// received them: the next is answered 429 with Retry-After, another token is not affected, a
// query forwarded to the leader is counted once (where the client sent it), and one that ends
// frees its place.
func TestBlockingQueriesPerTokenAreBounded(t *testing.T) {
	const perToken = 2
	d, root := ownACLCluster(t, t.TempDir(), &syncBuffer{}, func(c *config.Config) {
		c.MaxWatchesPerToken, c.MaxWatchesPerAddr = perToken, 0
	})
	leader, followers := roles(t, d)
	follower := followers[0]
	newTok := func(desc string) string {
		var tok api.NewToken
		ok(t, doAs(t, root, http.MethodPost, leader+"/v1/acl/tokens", api.CreateTokenRequest{Description: desc, Policies: []string{api.ManagementPolicy}}), http.StatusOK, &tok)
		return tok.SecretID
	}
	a, b := newTok("a"), newTok("b")
	// (A node that does not know a token yet counts its requests by address, as the rate
	// limiter does.)
	eventually(t, "every node knows the tokens", func() string {
		for i := range d.Size() {
			for _, s := range []string{a, b} {
				if _, _, known := d.Agent(i).Node().ResolveToken(s); !known {
					return d.Agent(i).Node().ID() + " does not"
				}
			}
		}
		return ""
	})
	name := lockName(t)
	// probe asks a blocking query that answers at once (wait 0): 200 if admitted, 429 if not.
	probe := func(ep, secret string) response {
		t.Helper()
		r := rawDo(http.MethodGet, ep+"/v1/locks/"+name+"?index=1&wait=0s", nil, as(secret))
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r
	}
	// perToken watches of a, through the follower, which waits on them itself (it answers
	// linearizable reads of the locks with a read index); each is admitted before the next
	// is sent.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var first context.CancelFunc
	var waiting []<-chan response
	for i := range perToken {
		wctx, wcancel := context.WithCancel(ctx)
		if i == 0 {
			first = wcancel
		} else {
			defer wcancel()
		}
		ch := make(chan response, 1)
		go func() {
			ch <- rawDoCtx(wctx, http.MethodGet, follower+"/v1/locks/"+name+"?index=1&wait=60s", nil, as(a))
		}()
		waiting = append(waiting, ch)
		want := float64(i + 1)
		eventually(t, "the watch waits on the follower", func() string {
			if got := metricValue(t, follower, "raftlock_blocking_queries"); got != want {
				return "blocking queries on the follower: " + formatFloat(got)
			}
			return ""
		})
	}
	for _, ch := range waiting {
		pending(t, ch, "a watch")
	}
	r := probe(follower, a)
	apiError(t, r, http.StatusTooManyRequests, api.CodeTooManyRequests)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("a refused watch without Retry-After")
	}
	// Another token is not affected, and the watches were not counted at the leader.
	ok(t, probe(follower, b), http.StatusOK, nil)
	ok(t, probe(leader, a), http.StatusOK, nil)
	// A watch that ends frees its place.
	first()
	<-waiting[0]
	eventually(t, "the ended watch's place is free", func() string {
		if r := probe(follower, a); r.status != http.StatusOK {
			return short(r.body)
		}
		return ""
	})
}

// metricValue returns the value of an unlabelled metric on ep's /metrics (-1 if absent).
func metricValue(t *testing.T, ep, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(string(metricsPage(t, ep)), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return -1
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// Without ACL the bound is per client address (--max-watches-per-address).
func TestBlockingQueriesPerAddressAreBounded(t *testing.T) {
	d := ownCluster(t, func(c *config.Config) { c.MaxWatchesPerAddr = 1 })
	_, followers := roles(t, d)
	ep := followers[0]
	name := lockName(t)
	ctx, cancel := context.WithCancel(t.Context())
	ch := make(chan response, 1)
	go func() {
		ch <- rawDoCtx(ctx, http.MethodGet, ep+"/v1/locks/"+name+"?index=1&wait=60s&consistency=stale", nil, nil)
	}()
	eventually(t, "the watch waits", func() string {
		if got := metricValue(t, ep, "raftlock_blocking_queries"); got != 1 {
			return "blocking queries: " + formatFloat(got)
		}
		return ""
	})
	r := do(t, http.MethodGet, ep+"/v1/locks?prefix=x/&index=1&wait=0s", nil)
	apiError(t, r, http.StatusTooManyRequests, api.CodeTooManyRequests)
	cancel()
	<-ch
	eventually(t, "the ended watch's place is free", func() string {
		if r := do(t, http.MethodGet, ep+"/v1/locks?prefix=x/&index=1&wait=0s", nil); r.status != http.StatusOK {
			return short(r.body)
		}
		return ""
	})
}
