// Command embedded-election is a small service run as three processes that elect a leader
// among themselves, with raftlock embedded in each (package embed): no lock server to run.
// The leader runs a periodic job, once per period, and writes its result to a file they all
// share, fenced by its token, so that a leader that was paused past its lease cannot write
// over its successor. Kill the leader and another process takes the job over.
//
//	go run ./examples/embedded-election --id n1 --peers n1=127.0.0.1:7201,n2=127.0.0.1:7202,n3=127.0.0.1:7203
//	go run ./examples/embedded-election --id n2 --peers n1=127.0.0.1:7201,n2=127.0.0.1:7202,n3=127.0.0.1:7203
//	go run ./examples/embedded-election --id n3 --peers n1=127.0.0.1:7201,n2=127.0.0.1:7202,n3=127.0.0.1:7203
//	tail -f jobs.log
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/embed"
)

// election is the name of the lock the replicas campaign for.
const election = "examples/embedded-election/leader"

// options are the command's flags.
type options struct {
	id, peers, dataDir, file     string
	period, ttl, electionTimeout time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.id, "id", "", "this replica's id, one of --peers")
	flag.StringVar(&o.peers, "peers", "", "every replica's id=host:port (its Raft address)")
	flag.StringVar(&o.dataDir, "data-dir", "", "where this replica keeps its Raft log (default data/<id>)")
	flag.StringVar(&o.file, "file", "jobs.log", "the file the replicas share, written by the leader's job")
	flag.DurationVar(&o.period, "period", 200*time.Millisecond, "how often the leader runs the job")
	flag.DurationVar(&o.ttl, "ttl", time.Second, "session TTL: how long a dead leader keeps the job")
	flag.DurationVar(&o.electionTimeout, "election-timeout", 200*time.Millisecond,
		"how long the replicas wait for a dead Raft leader (keep it well under the TTL)")
	flag.Parse()
	if o.dataDir == "" {
		o.dataDir = filepath.Join("data", o.id)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		log.Fatalf("%s: %v", o.id, err)
	}
}

// run starts the embedded node and campaigns until ctx ends (SIGINT, SIGTERM) or the node stops.
func run(ctx context.Context, o options) error {
	peers, err := embed.ParsePeers(o.peers)
	if err != nil {
		return err
	}
	node, err := embed.Start(ctx, embed.Config{
		ID:       o.id,
		DataDir:  o.dataDir,
		RaftAddr: peers[o.id],
		Peers:    peers,
		// A dead leader keeps the job for its session's TTL, plus the Raft election if its node
		// led Raft too: both are shortened from their defaults (2s minimum TTL, 500ms election
		// timeout) so that the job moves within 2s. Every replica must use the same values.
		MinSessionTTL:   o.ttl,
		ElectionTimeout: o.electionTimeout,
	})
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: the session goes, then the node hands leadership over
	// and snapshots.
	defer within(5*time.Second, node.Close)
	for ctx.Err() == nil {
		err := lead(ctx, node.Client(), o)
		select {
		case <-ctx.Done():
			return nil
		case <-node.Done():
			return node.Err()
		default:
		}
		log.Printf("%s: %v; campaigning again", o.id, err)
	}
	return nil
}

// lead campaigns on a new session and, once elected, runs the job until the leadership ends.
func lead(ctx context.Context, c *client.Client, o options) error {
	s, err := c.NewSession(ctx, client.WithTTL(o.ttl))
	if err != nil {
		return err
	}
	// Destroys the session: if it still led, the next leader is elected at once. Bounded: when
	// the other replicas are gone too, there is no quorum to destroy it, and it expires later.
	defer within(2*time.Second, s.Close)
	e := client.NewElection(s, election)
	if err := e.Campaign(ctx, o.id); err != nil {
		return err
	}
	log.Printf("%s: leading with token %d", o.id, e.Token())
	// e.Context() ends when the leadership does: the session lost (Done), or Resign.
	return runJob(e.Context(), o, e.Token())
}

// within runs stop with a context that ends after d.
func within(d time.Duration, stop func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = stop(ctx)
}

// runJob runs the job at the start of every period until ctx ends.
func runJob(ctx context.Context, o options, token uint64) error {
	for {
		next := time.Now().Truncate(o.period).Add(o.period)
		select {
		case <-ctx.Done():
			return fmt.Errorf("leadership lost: %w", context.Cause(ctx))
		case <-time.After(time.Until(next)):
		}
		if ctx.Err() != nil { // check again just before acting: the timer may have won the race
			continue
		}
		line := fmt.Sprintf("slot=%d token=%d id=%s at=%d", next.UnixNano()/int64(o.period), token, o.id, time.Now().UnixNano())
		if err := appendFenced(o.file, token, line); err != nil {
			if errors.Is(err, client.ErrStaleToken) {
				return err // a newer leader wrote: this one's leadership is over
			}
			log.Printf("%s: job: %v", o.id, err)
		}
	}
}
