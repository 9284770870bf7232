package jepsen

import (
	"context"
	"fmt"
	"time"

	"github.com/raftlock/raftlock/jepsen/cluster"
	"github.com/raftlock/raftlock/jepsen/history"
)

// LeaderChange names the spans in which the cluster had no leader or changed it, whether a
// fault caused it or not (a loaded machine misses heartbeats too).
const LeaderChange = "leader-change"

// electionPoll is how often watchElections asks who leads.
const electionPoll = 200 * time.Millisecond

// watchElections records each span in which no node said it led, or the leader's term changed,
// as a LeaderChange event. A new leader restarts every session's timer at the full TTL, so the
// timing checks (expiry) hold only away from leader changes; the nemesis records the ones it
// causes, and these are the others. The safety checks do not look at faults.
func watchElections(ctx context.Context, stop <-chan struct{}, c *cluster.Cluster, rec *history.Recorder) {
	t := time.NewTicker(electionPoll)
	defer t.Stop()
	var term, from uint64
	since := int64(-1) // start of the span being watched; -1 while the leader is settled
	// last is when the poll before this one began: its leader was seen at some moment after.
	last := rec.Now()
	for {
		select {
		case <-stop:
		case <-ctx.Done():
		case <-t.C:
			began := rec.Now()
			qctx, cancel := context.WithTimeout(ctx, 2*electionPoll)
			_, now, err := c.Leader(qctx)
			cancel()
			switch {
			case err != nil || (term != 0 && now != term):
				if since < 0 {
					since, from = last, term
				}
			case since >= 0:
				recordLeaderChange(rec, since, rec.Now(), from, now)
				since = -1
			}
			if err == nil {
				term = now
			}
			last = began
			continue
		}
		if since >= 0 {
			recordLeaderChange(rec, since, rec.Now(), from, term)
		}
		return
	}
}

// recordLeaderChange adds the event of a span [from, to] in which the term went from old to now.
func recordLeaderChange(rec *history.Recorder, from, to int64, old, now uint64) {
	rec.Add(history.Op{Process: -1, Kind: history.Nemesis, Type: history.OK, Fault: LeaderChange,
		Action: history.ActionEvent, FaultID: rec.NewFaultID(), Invoke: from, Complete: to,
		Detail: fmt.Sprintf("observed: term %d to %d", old, now)})
}
