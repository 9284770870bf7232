package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/config"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/jepsen/proxy"
)

// A write acknowledged by the leader is seen by every linearizable read that a follower
// receives after the acknowledgement, and the follower answers the read itself: nothing is
// forwarded to the leader, and the follower counts the reads it answered.
func TestFollowerReadSeesAcknowledgedWrites(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	f := followers[0]
	forwarded := metricValue(t, f, "raftlock_http_forwarded_requests_total")
	served := metricValue(t, f, "raftlock_http_follower_reads_total")
	name := lockName(t)
	s := session(t, leader)
	const rounds = 20
	for i := range rounds {
		held := mustAcquire(t, leader, name, s, strp(fmt.Sprint(i)))
		if l := getLock(t, f, name, ""); !l.Held || l.Token != held.Token || l.Value != fmt.Sprint(i) {
			t.Fatalf("round %d: the follower answered %+v after the leader acknowledged the grant under token %d", i, l, held.Token)
		}
		var cr api.CheckResponse
		ok(t, do(t, http.MethodGet, fmt.Sprintf("%s/v1/locks/%s/check?token=%d", f, name, held.Token), nil), http.StatusOK, &cr)
		if !cr.Current {
			t.Fatalf("round %d: the follower's check says token %d is not current", i, held.Token)
		}
		release(t, leader, name, s, held.Token)
		if l := getLock(t, f, name, ""); l.Held {
			t.Fatalf("round %d: the follower answered %+v after the leader acknowledged the release", i, l)
		}
	}
	if got := metricValue(t, f, "raftlock_http_forwarded_requests_total") - forwarded; got != 0 {
		t.Errorf("the follower forwarded %v requests; its linearizable reads must be its own", got)
	}
	if got := metricValue(t, f, "raftlock_http_follower_reads_total") - served; got < 3*rounds {
		t.Errorf("the follower counts %v reads it answered itself, want at least %d", got, 3*rounds)
	}
}

// A blocking query on a follower waits there and answers the change acknowledged at the leader.
func TestFollowerBlockingQuery(t *testing.T) {
	d := sharedCluster(t)
	leader, followers := roles(t, d)
	f := followers[0]
	name := lockName(t)
	forwarded := metricValue(t, f, "raftlock_http_forwarded_requests_total")
	r := do(t, http.MethodGet, f+"/v1/locks/"+name, nil)
	ok(t, r, http.StatusOK, nil)
	var l api.Lock
	ok(t, r, http.StatusOK, &l)
	waiting := goDo(context.Background(), http.MethodGet, fmt.Sprintf("%s/v1/locks/%s?index=%d&wait=20s", f, name, l.ModifyIndex), nil)
	pending(t, waiting, "the blocking query")
	held := mustAcquire(t, leader, name, session(t, leader), nil)
	got := await(t, waiting, "the blocking query")
	ok(t, got, http.StatusOK, &l)
	if !l.Held || l.Token != held.Token {
		t.Fatalf("the blocking query answered %+v, want the grant under token %d", l, held.Token)
	}
	// A prefix watch too.
	w := goDo(context.Background(), http.MethodGet, fmt.Sprintf("%s/v1/locks?prefix=%s&index=%d&wait=20s", f, name, l.ModifyIndex), nil)
	pending(t, w, "the prefix watch")
	release(t, leader, name, l.Session, held.Token)
	var ch api.LockChanges
	ok(t, await(t, w, "the prefix watch"), http.StatusOK, &ch)
	if len(ch.Locks) != 1 || ch.Locks[0].Held {
		t.Fatalf("the prefix watch answered %+v, want the release", ch)
	}
	if got := metricValue(t, f, "raftlock_http_forwarded_requests_total") - forwarded; got != 0 {
		t.Errorf("the follower forwarded %v requests; its blocking queries must be its own", got)
	}
}

// Reads that wait at a follower together share the leader's answers: a burst of reads makes
// far fewer requests for a read index than there are reads. A read answered 503 (a leader
// change on a busy machine) is asked again, as a client would, and counts again.
func TestFollowerReadsShareRounds(t *testing.T) {
	d := sharedCluster(t)
	_, followers := roles(t, d)
	f := followers[0]
	name := lockName(t)
	before := metricValue(t, f, "raftlock_http_read_index_rounds_total")
	const readers = 64
	var wg sync.WaitGroup
	var asked atomic.Int64
	errs := make(chan string, readers)
	start := make(chan struct{})
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for end := time.Now().Add(deadline); ; {
				asked.Add(1)
				r := rawDo(http.MethodGet, f+"/v1/locks/"+name, nil, nil)
				if r.err == nil && r.status == http.StatusOK {
					return
				}
				if r.status != http.StatusServiceUnavailable || time.Now().After(end) {
					errs <- fmt.Sprintf("%v %d %s", r.err, r.status, short(r.body))
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("a read failed: %s", e)
	}
	reads := asked.Load()
	rounds := metricValue(t, f, "raftlock_http_read_index_rounds_total") - before
	if rounds < 1 || rounds > float64(reads/2) {
		t.Fatalf("%d reads at a follower asked the leader %v times, want between 1 and %d", reads, rounds, reads/2)
	}
	t.Logf("%d reads, %v rounds", reads, rounds)
}

// A follower cut off from the rest of the cluster's Raft traffic never answers a linearizable
// read from its stale state: while the others commit a write, its read fails with 503, and it
// answers again once it has caught up.
func TestPartitionedFollowerReadFails(t *testing.T) {
	var mesh *proxy.Mesh
	var once sync.Once
	d := ownCluster(t, func(c *config.Config) {
		once.Do(func() {
			var err error
			if mesh, err = proxy.NewMesh(c.InitialCluster); err != nil {
				t.Fatal(err)
			}
		})
		peers, err := config.ParseMembers("raft-peer-addrs", mesh.PeerAddrs(c.ID))
		if err != nil {
			t.Fatal(err)
		}
		c.RaftPeerAddrs = peers
	})
	t.Cleanup(func() { mesh.Close() })
	leader, followers := roles(t, d)
	f := followers[0]
	fid := nodeIDAt(t, f)
	name := lockName(t)
	s := session(t, leader)
	if l := getLock(t, f, name, ""); l.Held {
		t.Fatalf("free lock read as %+v", l)
	}
	var others []string
	for id := range d.Config(0).InitialCluster {
		if id != fid {
			others = append(others, id)
		}
	}
	mesh.Partition([]string{fid}, others)
	defer mesh.HealAll()
	held := mustAcquire(t, leader, name, s, nil)
	// The follower's state lacks the grant, and stays so while cut off.
	r := rawDo(http.MethodGet, f+"/v1/locks/"+name, nil, nil)
	if r.status == http.StatusOK {
		t.Fatalf("the cut-off follower answered a linearizable read: %s (the leader granted token %d)", r.body, held.Token)
	}
	apiError(t, r, http.StatusServiceUnavailable, codeOf(t, r))
	// A stale read is still answered, from its own state.
	if l := getLock(t, f, name, "?consistency=stale"); l.Held {
		t.Fatalf("the cut-off follower's stale read shows %+v, which its state cannot have", l)
	}
	mesh.HealAll()
	eventually(t, "the follower answers again", func() string {
		r := rawDo(http.MethodGet, f+"/v1/locks/"+name, nil, nil)
		if r.status != http.StatusOK {
			return fmt.Sprintf("%d %s", r.status, short(r.body))
		}
		return ""
	})
	if l := getLock(t, f, name, ""); !l.Held || l.Token != held.Token {
		t.Fatalf("after healing the follower answered %+v, want the grant under token %d", l, held.Token)
	}
}

// codeOf returns the error code of an answer, which must be one that a read may fail with
// when it cannot be confirmed current: no_leader or timeout.
func codeOf(t *testing.T, r response) string {
	t.Helper()
	for _, code := range []string{api.CodeNoLeader, api.CodeTimeout} {
		if strings.Contains(string(r.body), `"`+code+`"`) {
			return code
		}
	}
	t.Fatalf("a read that cannot be confirmed answered %d %s, want 503 no_leader or timeout", r.status, short(r.body))
	return ""
}

// nodeIDAt returns the id of the node serving ep.
func nodeIDAt(t *testing.T, ep string) string {
	t.Helper()
	var h api.Health
	ok(t, do(t, http.MethodGet, ep+"/v1/health", nil), http.StatusOK, &h)
	return h.ID
}

// In a cluster that has not enabled the peer channel (a member of a version before it), a
// follower asks the leader for read indexes, and sends its renewal batches, over HTTP; in one
// that has, over the channel. Either way it answers its reads itself.
func TestFollowerReadsAndRenewalsTakeTheChannelOrHTTP(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *agent.Dev
		via  string
	}{{"channel", sharedCluster(t), "channel"}, {"mixed", mixedCluster(t), "http"}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.via == "channel" {
				// A restore of an older backup by another test of the shared cluster takes
				// the enabled features back to the backup's until the leader enables them
				// again: wait for every feature, the channel's among them.
				if err := settleFeatures(tc.d, nil, len(fsm.AllFeatures())); err != nil {
					t.Fatal(err)
				}
			}
			leader, followers := roles(t, tc.d)
			f := followers[0]
			before, rounds := forwardedVia(t, f), metricValue(t, f, "raftlock_http_read_index_rounds_total")
			name := lockName(t)
			s := session(t, leader)
			held := mustAcquire(t, leader, name, s, nil)
			if l := getLock(t, f, name, ""); !l.Held || l.Token != held.Token {
				t.Fatalf("the follower answered %+v, want the grant under token %d", l, held.Token)
			}
			// A leader change on a busy machine, or a dial that failed a moment ago (the
			// channel waits up to 2 s before it dials again), sends some over HTTP: in the
			// cluster with the channel, renew until one takes it, for up to 10 s.
			after := before
			for end := time.Now().Add(10 * time.Second); ; {
				var rr api.RenewResponse
				ok(t, do(t, http.MethodPut, f+"/v1/sessions/"+s+"/renew", nil), http.StatusOK, &rr)
				if after = forwardedVia(t, f); tc.via == "http" || after["channel"] > before["channel"] || time.Now().After(end) {
					break
				}
				time.Sleep(100 * time.Millisecond) // sampling the forwards, not a synchronisation
			}
			if got := metricValue(t, f, "raftlock_http_read_index_rounds_total") - rounds; got < 1 {
				t.Errorf("the follower asked for %v read indexes", got)
			}
			other := map[string]string{"channel": "http", "http": "channel"}[tc.via]
			if after[tc.via]-before[tc.via] != 1 || tc.via == "http" && after[other] != before[other] {
				t.Errorf("the renewal went %v, want once %s", map[string]int{"channel": after["channel"] - before["channel"], "http": after["http"] - before["http"]}, tc.via)
			}
		})
	}
}
