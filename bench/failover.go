package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/agent"
	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/client"
)

// failoverAttemptTimeout bounds one acquire attempt after the kill; failoverLimit one trial.
const (
	failoverAttemptTimeout = time.Second
	failoverLimit          = 30 * time.Second
	failoverPoll           = 2 * time.Millisecond
)

// FailoverResult holds the figures of the failover workload.
type FailoverResult struct {
	// Skipped says why the workload did not run (it needs an in-process cluster).
	Skipped string          `json:"skipped,omitempty"`
	Trials  []FailoverTrial `json:"trials,omitempty"`
	// Recovery summarises the time from the kill until an acquire succeeded again, Election
	// the time until a surviving node led (and had passed its Barrier).
	Recovery Latency `json:"recovery"`
	Election Latency `json:"election"`
	Failed   int     `json:"failed"`
}

// FailoverTrial is one leader kill.
type FailoverTrial struct {
	Killed     string  `json:"killed"`
	NewLeader  string  `json:"new_leader"`
	RecoveryMs float64 `json:"recovery_ms"`
	ElectionMs float64 `json:"election_ms"`
	// Attempts is the number of acquire attempts until one succeeded.
	Attempts int    `json:"attempts"`
	Error    string `json:"error,omitempty"`
}

func (r *runner) failover(ctx context.Context) (FailoverResult, error) {
	var res FailoverResult
	d := r.opts.Dev
	if d == nil {
		res.Skipped = "needs an in-process cluster (--dev) to kill the leader"
		return res, nil
	}
	clients := make([]*client.Client, d.Size())
	for i, ep := range d.Endpoints() {
		c, err := client.New([]string{ep}, client.WithRetryTimeout(0), client.WithRequestTimeout(failoverAttemptTimeout))
		if err != nil {
			return res, fmt.Errorf("bench: %w", err)
		}
		defer c.Close()
		clients[i] = c
	}
	var recovery, election []time.Duration
	for trial := range r.opts.FailoverTrials {
		stop := r.progress(func(time.Time) string {
			return fmt.Sprintf("failover: trial %d/%d", trial+1, r.opts.FailoverTrials)
		})
		tr, err := r.failoverTrial(ctx, d, clients, trial)
		stop()
		if err != nil {
			return res, err
		}
		res.Trials = append(res.Trials, tr)
		if tr.Error != "" {
			res.Failed++
			continue
		}
		recovery = append(recovery, time.Duration(tr.RecoveryMs*float64(time.Millisecond)))
		election = append(election, time.Duration(tr.ElectionMs*float64(time.Millisecond)))
	}
	res.Recovery, res.Election = summarize(recovery), summarize(election)
	return res, nil
}

// failoverTrial kills the leader of a healthy cluster, polls every survivor with acquires
// until one is granted, and restarts the killed node.
func (r *runner) failoverTrial(ctx context.Context, d *agent.Dev, clients []*client.Client, trial int) (FailoverTrial, error) {
	var tr FailoverTrial
	if err := waitHealthy(ctx, d, clients); err != nil {
		return tr, err
	}
	li, err := d.WaitLeader(ctx)
	if err != nil {
		return tr, fmt.Errorf("bench: failover: %w", err)
	}
	tr.Killed = d.Agent(li).Node().ID()
	lc := clients[li]
	s, err := lc.CreateSession(ctx, api.CreateSessionRequest{TTL: workerSessionTTL.String(), Name: "bench-failover"})
	if err != nil {
		return tr, fmt.Errorf("bench: failover: %w", err)
	}
	name := r.lockName("failover", strconv.Itoa(trial))
	// Warm every survivor's connection, so the figure does not include dialing.
	for i, c := range clients {
		if i != li {
			_, _ = c.GetLock(ctx, name, client.Stale())
		}
	}
	killed := time.Now()
	if err := d.Kill(li); err != nil {
		return tr, fmt.Errorf("bench: failover: %w", err)
	}
	elected := make(chan time.Duration, 1)
	ectx, cancel := context.WithTimeout(ctx, failoverLimit)
	defer cancel()
	go func() {
		if _, err := d.WaitLeader(ectx); err == nil {
			elected <- time.Since(killed)
		}
		close(elected)
	}()
	granted := -1
	for i := li + 1; ectx.Err() == nil; i++ {
		j := i % len(clients)
		if j == li {
			continue
		}
		tr.Attempts++
		actx, acancel := context.WithTimeout(ectx, failoverAttemptTimeout)
		_, err := clients[j].Acquire(actx, name, api.AcquireRequest{Session: s.ID})
		acancel()
		if err == nil {
			tr.RecoveryMs, granted = ms(time.Since(killed)), j
			break
		}
		sleep(ectx, failoverPoll)
	}
	if e, ok := <-elected; ok {
		tr.ElectionMs = ms(e)
	}
	if granted < 0 {
		tr.Error = fmt.Sprintf("no acquire succeeded within %s of the kill", failoverLimit)
	} else {
		_, _ = clients[granted].DestroySession(ctx, s.ID)
		if nl, err := d.WaitLeader(ctx); err == nil {
			tr.NewLeader = d.Agent(nl).Node().ID()
		}
	}
	if err := d.Restart(ctx, li); err != nil {
		return tr, fmt.Errorf("bench: failover: restarting %s: %w", tr.Killed, err)
	}
	return tr, nil
}

// waitHealthy waits until every node runs, a leader leads, and every node answers ready.
func waitHealthy(ctx context.Context, d *agent.Dev, clients []*client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, failoverLimit)
	defer cancel()
	eps := d.Endpoints()
	for {
		ok := true
		for i := range clients {
			if d.Agent(i) == nil || clients[i].Ready(ctx, eps[i]) != nil {
				ok = false
				break
			}
		}
		if ok {
			if _, err := d.WaitLeader(ctx); err == nil {
				return nil
			}
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return fmt.Errorf("bench: failover: cluster not healthy: %w", ctx.Err())
		}
	}
}
