package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/internal/testkit"
)

// Test kinds of channel request, beyond those the server uses.
const (
	kindEcho    cluster.ChannelKind = 200 // answers the payload reversed; "block" waits for its end
	kindUnknown cluster.ChannelKind = 201 // served by nobody
)

// blocked reports the requests "block" of kindEcho: starts receives one as its handler starts,
// ends, once its context ends, whether that context had a deadline.
type blocked struct{ starts, ends chan bool }

// channelCluster starts three nodes sharing their Raft ports with the channel, each serving
// kindEcho.
func channelCluster(t testing.TB) (c *testCluster, leader int, follower *cluster.Node, b blocked) {
	t.Helper()
	c = newTestCluster(t, 3, func(cfg *cluster.Config) { cfg.APIOnRaftPort = true })
	leader, n := c.waitLeader()
	c.waitPublished(n)
	b = blocked{starts: make(chan bool, 16), ends: make(chan bool, 16)}
	ends := b.ends
	for _, i := range c.running() {
		c.node(i).HandleChannel(kindEcho, func(ctx context.Context, req cluster.ChannelRequest) []byte {
			if string(req.Payload) == "block" {
				b.starts <- true
				<-ctx.Done()
				_, has := ctx.Deadline()
				ends <- has
				return nil
			}
			out := bytes.Clone(req.Payload)
			for a, b := 0, len(out)-1; a < b; a, b = a+1, b-1 {
				out[a], out[b] = out[b], out[a]
			}
			return out
		})
	}
	follower = c.node(c.followers(leader)[0])
	testkit.Eventually(t, leaderTimeout, "the follower to use the channel", func() bool {
		_, l := follower.Raft().LeaderWithID()
		return follower.ChannelEnabled() && string(l) == n.ID()
	})
	return c, leader, follower, b
}

// Many requests in flight at once share the channel, and each gets its own answer; a kind the
// leader does not serve is refused with nothing done.
func TestChannelMultiplexes(t *testing.T) {
	_, _, f, _ := channelCluster(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			payload := fmt.Sprintf("request %03d", i)
			_, out, err := f.CallLeader(opContext(t), kindEcho, []byte(payload))
			if err != nil {
				errs <- err
				return
			}
			want := []byte(payload)
			for a, b := 0, len(want)-1; a < b; a, b = a+1, b-1 {
				want[a], want[b] = want[b], want[a]
			}
			if !bytes.Equal(out, want) {
				errs <- fmt.Errorf("answer %q to %q", out, payload)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, _, err := f.CallLeader(opContext(t), kindUnknown, nil); !errors.Is(err, cluster.ErrChannelUnknownKind) {
		t.Fatalf("a kind nobody serves: %v, want ErrChannelUnknownKind", err)
	}
}

// A caller's deadline travels with its request, and a caller that gives up ends the request's
// context on the leader; its own answer says the outcome is unknown.
func TestChannelCancels(t *testing.T) {
	_, _, f, b := channelCluster(t)
	ctx, cancel := context.WithTimeout(opContext(t), 300*time.Millisecond)
	defer cancel()
	// The handler ends at the deadline too, and its answer may come first.
	if _, _, err := f.CallLeader(ctx, kindEcho, []byte("block")); err != nil && !errors.Is(err, cluster.ErrUnknownOutcome) {
		t.Fatalf("a call past its deadline: %v", err)
	}
	if !receiveBool(t, b.ends, "the end of the handler of a call with a deadline") {
		t.Fatal("the leader's handler had no deadline")
	}
	receiveBool(t, b.starts, "the start of the first blocked handler")

	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, _, err := f.CallLeader(ctx, kindEcho, []byte("block"))
		done <- err
	}()
	receiveBool(t, b.starts, "the handler's start")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !errors.Is(err, cluster.ErrUnknownOutcome) {
		t.Fatalf("a cancelled call: %v", err)
	}
	if receiveBool(t, b.ends, "the end of the cancelled call's handler") {
		t.Fatal("a handler without a deadline had one")
	}
}

func receiveBool(t *testing.T, ch <-chan bool, what string) bool {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(leaderTimeout):
		t.Fatalf("waited in vain for %s", what)
		return false
	}
}

// A request in flight when the leader dies fails with ErrUnknownOutcome, never an answer; the
// follower reaches the next leader over a new connection.
func TestChannelLeaderLost(t *testing.T) {
	c, leader, f, b := channelCluster(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := f.CallLeader(context.Background(), kindEcho, []byte("block"))
		done <- err
	}()
	receiveBool(t, b.starts, "the handler's start")
	c.kill(leader)
	select {
	case err := <-done:
		if !errors.Is(err, cluster.ErrUnknownOutcome) {
			t.Fatalf("a call cut off by the leader's end: %v", err)
		}
	case <-time.After(leaderTimeout):
		t.Fatal("the call outlived its leader")
	}
	_, n := c.waitLeader()
	testkit.Eventually(t, leaderTimeout, "a call to the new leader", func() bool {
		if f == n {
			return true // the follower leads now: nothing to reach
		}
		_, out, err := f.CallLeader(opContext(t), kindEcho, []byte("ab"))
		return err == nil && string(out) == "ba"
	})
}

// A follower's question for a read index names it and its term, and the leader of three
// voters counts it as one of the majority: the index is answered without a round of
// heartbeats, and covers every write acknowledged before the question.
func TestFollowerReadIndexCountsTheAskerAmongThree(t *testing.T) {
	c, leader, follower, _ := channelCluster(t)
	l := c.node(leader)
	s := createSession(t, l, "reader", 30*time.Second, 0)
	token := mustAcquire(t, l, s, "jobs/read-index", "")
	before := gatherSeries(t, l, "raftlock_read_indexes_total", "confirmed_by", "asker")
	index, err := follower.LeaderReadIndex(opContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if index < token {
		t.Fatalf("read index %d is below the acknowledged grant's index %d", index, token)
	}
	if got := gatherSeries(t, l, "raftlock_read_indexes_total", "confirmed_by", "asker"); got != before+1 {
		t.Fatalf("read indexes confirmed with the asker counted: %v, want %v", got, before+1)
	}
}

// The leader counts an asker only in its own term and only as the voter its id and address
// name together; any other question is confirmed by acknowledgments alone.
func TestReadIndexCountsOnlyAVoterOfTheLeadersTerm(t *testing.T) {
	c, leader, follower, _ := channelCluster(t)
	l := c.node(leader)
	var self raft.Server
	for _, s := range l.Raft().GetConfiguration().Configuration().Servers {
		if string(s.ID) == follower.ID() {
			self = s
		}
	}
	term := l.Raft().CurrentTerm()
	cases := []struct {
		name  string
		asker raft.Server
		term  uint64
		asked bool
	}{
		{"the follower in the leader's term", self, term, true},
		{"the follower in an older term", self, term - 1, false},
		{"the follower's id at another address", raft.Server{ID: self.ID, Address: "127.0.0.1:1"}, term, false},
		{"nobody named", raft.Server{}, term, false},
	}
	for _, tc := range cases {
		asker := gatherSeries(t, l, "raftlock_read_indexes_total", "confirmed_by", "asker")
		acks := gatherSeries(t, l, "raftlock_read_indexes_total", "confirmed_by", "acks")
		if _, err := l.ReadIndexFor(opContext(t), tc.asker, tc.term); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		gotAsker := gatherSeries(t, l, "raftlock_read_indexes_total", "confirmed_by", "asker") - asker
		gotAcks := gatherSeries(t, l, "raftlock_read_indexes_total", "confirmed_by", "acks") - acks
		if want := map[bool][2]float64{true: {1, 0}, false: {0, 1}}[tc.asked]; gotAsker != want[0] || gotAcks != want[1] {
			t.Errorf("%s: confirmed with the asker %v times, by acknowledgments %v times; want %v", tc.name, gotAsker, gotAcks, want)
		}
	}
}

// BenchmarkChannelCalls measures requests through a follower's channel to the leader, from one
// caller and from 64 at once; writes/call counts this process's write system calls (both ends
// of the channel, and the cluster's Raft traffic) per request.
func BenchmarkChannelCalls(b *testing.B) {
	_, _, f, _ := channelCluster(b)
	call := func(b *testing.B) bool {
		if _, _, err := f.CallLeader(opContext(b), kindEcho, []byte("a request")); err != nil {
			b.Error(err)
			return false
		}
		return true
	}
	measure := func(b *testing.B, run func()) {
		w0 := writeSyscalls()
		b.ResetTimer()
		run()
		b.StopTimer()
		if w0 >= 0 {
			b.ReportMetric(float64(writeSyscalls()-w0)/float64(b.N), "writes/call")
		}
	}
	b.Run("callers=1", func(b *testing.B) {
		measure(b, func() {
			for range b.N {
				if !call(b) {
					return
				}
			}
		})
	})
	b.Run("callers=64", func(b *testing.B) {
		b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
		measure(b, func() {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !call(b) {
						return
					}
				}
			})
		})
	})
}

// writeSyscalls returns the write system calls this process has made (Linux's /proc/self/io),
// or -1 where that cannot be read.
func writeSyscalls() int64 {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, "syscw: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
