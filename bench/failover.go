package bench

import (
	"context"
	"fmt"
	"slices"
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
	// Skipped says why the workload did not run (it kills nodes: they must run in this
	// process with --dev, or as processes on this machine).
	Skipped string          `json:"skipped,omitempty"`
	Trials  []FailoverTrial `json:"trials,omitempty"`
	// Recovery summarises the time from the kill until an acquire succeeded again, Election
	// the time until a surviving node led and served (for a cluster of processes, as polling
	// the survivors' GET /v1/cluster every few milliseconds sees it, so it can come a little
	// after the first grant).
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
	// KilledPID is the killed node's process, RestartedPID the one the bench started in its
	// place (0 when a supervisor restarted it), RestartLog where that one writes its output;
	// all three only for a cluster of processes.
	KilledPID    int    `json:"killed_pid,omitempty"`
	RestartedPID int    `json:"restarted_pid,omitempty"`
	RestartLog   string `json:"restart_log,omitempty"`
}

// failoverNodes are the nodes the failover workload kills and brings back: the in-process
// cluster of --dev, or the processes of a cluster that runs on this machine.
type failoverNodes interface {
	// endpoints returns the nodes' HTTP base URLs; ids their ids, in the same order.
	endpoints() []string
	ids() []string
	// leader waits until a node leads and serves, and returns its index; clients has a client
	// per node, asking only that node.
	leader(ctx context.Context, clients []*client.Client) (int, error)
	// kill stops node i at once, as a crash would, and returns when it did.
	kill(i int, tr *FailoverTrial) (time.Time, error)
	// restart brings node i back, or waits until something else did; it does not wait for
	// the node to serve.
	restart(ctx context.Context, i int, tr *FailoverTrial) error
}

func (r *runner) failover(ctx context.Context) (FailoverResult, error) {
	var res FailoverResult
	var nodes failoverNodes
	switch {
	case r.opts.Dev != nil:
		nodes = devNodes{r.opts.Dev}
	case !r.opts.KillProcesses:
		res.Skipped = "it kills the leader's process; name it in --workload to let it (the nodes must run on this machine)"
		return res, nil
	default:
		pn, skip, err := findProcNodes(ctx, r.opts.Endpoints, r.opts.Supervised, r.opts.clientOptions()...)
		if err != nil {
			return res, err
		}
		if skip != "" {
			res.Skipped = skip
			return res, nil
		}
		nodes = pn
	}
	clients, err := nodeClients(nodes.endpoints(), r.opts.clientOptions()...)
	if err != nil {
		return res, err
	}
	defer closeClients(clients)
	var recovery, election []time.Duration
	for trial := range r.opts.FailoverTrials {
		stop := r.progress(func(time.Time) string {
			return fmt.Sprintf("failover: trial %d/%d", trial+1, r.opts.FailoverTrials)
		})
		tr, err := r.failoverTrial(ctx, nodes, clients, trial)
		stop()
		if tr.Killed != "" {
			res.Trials = append(res.Trials, tr)
		}
		if err != nil {
			return res, err
		}
		if tr.Error != "" {
			res.Failed++
			continue
		}
		recovery = append(recovery, time.Duration(tr.RecoveryMs*float64(time.Millisecond)))
		election = append(election, time.Duration(tr.ElectionMs*float64(time.Millisecond)))
	}
	res.Recovery, res.Election = summarize(recovery), summarize(election)
	// Leave the cluster whole: the last killed node serves again before the bench goes on.
	return res, waitHealthy(ctx, nodes, clients)
}

// failoverTrial kills the leader of a healthy cluster, polls every survivor with acquires
// until one is granted, and brings the killed node back.
func (r *runner) failoverTrial(ctx context.Context, nodes failoverNodes, clients []*client.Client, trial int) (FailoverTrial, error) {
	var tr FailoverTrial
	if err := waitHealthy(ctx, nodes, clients); err != nil {
		return tr, err
	}
	li, err := nodes.leader(ctx, clients)
	if err != nil {
		return tr, fmt.Errorf("bench: failover: %w", err)
	}
	ids := nodes.ids()
	lc := clients[li]
	s, err := lc.Raw().CreateSession(ctx, api.CreateSessionRequest{TTL: workerSessionTTL.String(), Name: "bench-failover"})
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
	tr.Killed = ids[li]
	killed, err := nodes.kill(li, &tr)
	if err != nil {
		return tr, fmt.Errorf("bench: failover: killing the leader %s: %w", tr.Killed, err)
	}
	elected := make(chan time.Duration, 1)
	ectx, cancel := context.WithTimeout(ctx, failoverLimit)
	defer cancel()
	go func() {
		if _, err := nodes.leader(ectx, clients); err == nil {
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
		_, err := clients[j].Raw().Acquire(actx, name, api.AcquireRequest{Session: s.ID})
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
		_, _ = clients[granted].Raw().DestroySession(ctx, s.ID)
		if nl, err := nodes.leader(ctx, clients); err == nil {
			tr.NewLeader = ids[nl]
		}
	}
	if err := nodes.restart(ctx, li, &tr); err != nil {
		return tr, fmt.Errorf("bench: failover: bringing %s back: %w", tr.Killed, err)
	}
	return tr, nil
}

// nodeClients returns a client for each endpoint that asks only that node, once, and gives up
// after failoverAttemptTimeout.
func nodeClients(eps []string, opts ...client.Option) ([]*client.Client, error) {
	clients := make([]*client.Client, 0, len(eps))
	opts = append(slices.Clone(opts), client.WithRetryTimeout(0), client.WithRequestTimeout(failoverAttemptTimeout))
	for _, ep := range eps {
		c, err := client.New([]string{ep}, opts...)
		if err != nil {
			closeClients(clients)
			return nil, fmt.Errorf("bench: %w", err)
		}
		clients = append(clients, c)
	}
	return clients, nil
}

func closeClients(clients []*client.Client) {
	for _, c := range clients {
		c.Close()
	}
}

// waitHealthy waits until every node answers ready and a leader leads.
func waitHealthy(ctx context.Context, nodes failoverNodes, clients []*client.Client) error {
	ctx, cancel := context.WithTimeout(ctx, failoverLimit)
	defer cancel()
	eps := nodes.endpoints()
	for {
		ok := true
		for i := range clients {
			if clients[i].Raw().Ready(ctx, eps[i]) != nil {
				ok = false
				break
			}
		}
		if ok {
			if _, err := nodes.leader(ctx, clients); err == nil {
				return nil
			}
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return fmt.Errorf("bench: failover: cluster not healthy: %w", ctx.Err())
		}
	}
}

// devNodes are the nodes of an in-process cluster.
type devNodes struct{ d *agent.Dev }

func (n devNodes) endpoints() []string { return n.d.Endpoints() }

func (n devNodes) ids() []string {
	ids := make([]string, n.d.Size())
	for i := range ids {
		if a := n.d.Agent(i); a != nil { // every node runs while a trial reads them
			ids[i] = a.Node().ID()
		}
	}
	return ids
}

func (n devNodes) leader(ctx context.Context, _ []*client.Client) (int, error) {
	return n.d.WaitLeader(ctx)
}

func (n devNodes) kill(i int, _ *FailoverTrial) (time.Time, error) {
	at := time.Now()
	return at, n.d.Kill(i)
}

func (n devNodes) restart(ctx context.Context, i int, _ *FailoverTrial) error {
	return n.d.Restart(ctx, i)
}
