package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
)

// Run runs the chosen workloads in order (uncontended, contended, semaphore, rwlock, sessions,
// failover) and
// returns their figures. When a workload sees a violation, Run still finishes and returns the
// report with an error that wraps ErrViolation; any other error ends it early and comes with
// the figures gathered so far.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &runner{
		opts:  opts,
		runID: fmt.Sprintf("%08x", rand.Uint32()),
		hc:    &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: opts.TLS}},
	}
	defer r.hc.CloseIdleConnections()
	rep := &Report{}
	if rep.Environment, err = r.environment(ctx); err != nil {
		return nil, err
	}
	rep.Environment.StealPercent, err = stealDuring(func() error {
		for _, w := range append(AllWorkloads(), Watch) {
			if !slices.Contains(opts.Workloads, w) {
				continue
			}
			if err := r.runWorkload(ctx, w, rep); err != nil {
				return err
			}
		}
		return nil
	})
	rep.Environment.LoadAvgEnd = loadAvg()
	if err != nil {
		return rep, err
	}
	if opts.Dev != nil {
		if d, err := syncLatency(opts.Dev.DataDir()); err == nil {
			rep.Environment.DiskSyncEndMs = ms(d)
		}
	}
	if v := rep.Violations(); len(v) > 0 {
		return rep, fmt.Errorf("%w: %s", ErrViolation, strings.Join(v, "; "))
	}
	return rep, nil
}

func (r *runner) runWorkload(ctx context.Context, w string, rep *Report) error {
	switch w {
	case Uncontended:
		for _, c := range r.opts.UncontendedClients {
			res, steal, err := withSteal(func() (UncontendedResult, error) { return r.uncontended(ctx, c) })
			if err != nil {
				return err
			}
			res.StealPercent = steal
			rep.Uncontended = append(rep.Uncontended, res)
		}
	case Contended:
		for _, c := range r.opts.ContendedClients {
			if c < 2 {
				continue
			}
			res, steal, err := withSteal(func() (ContendedResult, error) { return r.contended(ctx, c) })
			if err != nil {
				return err
			}
			res.StealPercent = steal
			rep.Contended = append(rep.Contended, res)
		}
	case Semaphore, RWLock:
		for _, c := range r.opts.KindClients {
			if c < 2 {
				continue
			}
			if err := r.runKindRow(ctx, w, c, rep); err != nil {
				return err
			}
		}
	case Sessions:
		res, err := r.sessions(ctx)
		if err != nil {
			return err
		}
		rep.Sessions = &res
	case Watch:
		for _, mode := range r.opts.WatchModes {
			res, steal, err := withSteal(func() (WatchResult, error) { return r.watch(ctx, mode) })
			res.StealPercent = steal
			if mode == WatchStream {
				rep.WatchStream = &res
			} else {
				rep.Watch = &res
			}
			if err != nil {
				return err
			}
		}
	case Failover:
		res, err := r.failover(ctx)
		rep.Failover = &res // the trials so far, even after an error: they name the nodes it killed
		if err != nil {
			return err
		}
	}
	return nil
}

// runKindRow runs one row of the semaphore or rwlock workload and adds it to rep.
func (r *runner) runKindRow(ctx context.Context, w string, clients int, rep *Report) error {
	if w == Semaphore {
		res, steal, err := withSteal(func() (SemaphoreResult, error) { return r.semaphore(ctx, clients) })
		if err != nil {
			return err
		}
		res.StealPercent = steal
		rep.Semaphore = append(rep.Semaphore, res)
		return nil
	}
	res, steal, err := withSteal(func() (RWResult, error) { return r.rwlock(ctx, clients) })
	if err != nil {
		return err
	}
	res.StealPercent = steal
	rep.RWLock = append(rep.RWLock, res)
	return nil
}

// runner holds what the workloads of one Run share.
type runner struct {
	opts  Options
	runID string       // keeps lock names of different runs apart
	hc    *http.Client // plain client for /metrics
}

// lockName returns a lock name unique to this run.
func (r *runner) lockName(parts ...string) string {
	return "bench/" + r.runID + "/" + strings.Join(parts, "/")
}

// target is the cluster as a workload starts: a client whose first endpoint follows
// Options.Via, and the leader's endpoint.
type target struct {
	c      *client.Client
	leader string   // base URL of the leader's HTTP API
	id     string   // the leader's node id
	nodes  []string // base URLs of every member's HTTP API
}

// connect asks the cluster who leads and returns a client ordered according to Options.Via.
func (r *runner) connect(ctx context.Context) (*target, error) {
	probe, err := client.New(r.opts.Endpoints, r.opts.clientOptions()...)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer probe.Close()
	cl, err := probe.Raw().Cluster(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: reading the cluster: %w", err)
	}
	scheme := "http://"
	if strings.HasPrefix(r.opts.Endpoints[0], "https://") {
		scheme = "https://"
	}
	t := &target{id: cl.Leader}
	var followers []string
	for _, m := range cl.Members {
		if m.HTTPAddr == "" {
			continue
		}
		t.nodes = append(t.nodes, scheme+m.HTTPAddr)
		if m.ID == cl.Leader {
			t.leader = scheme + m.HTTPAddr
		} else {
			followers = append(followers, scheme+m.HTTPAddr)
		}
	}
	eps := r.opts.Endpoints
	switch {
	case r.opts.Via == ViaLeader && t.leader != "":
		eps = append([]string{t.leader}, followers...)
	case r.opts.Via == ViaFollower && len(followers) > 0:
		eps = append(slices.Clone(followers), t.leader)
	}
	eps = slices.DeleteFunc(eps, func(s string) bool { return s == "" })
	if t.leader == "" {
		t.leader = eps[0]
	}
	var extra []client.Option
	if r.opts.Via == ViaFollower {
		extra = append(extra, client.WithoutLeaderRouting())
	}
	if t.c, err = client.New(eps, r.opts.clientOptions(extra...)...); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	return t, nil
}

// environment describes where the figures come from.
func (r *runner) environment(ctx context.Context) (Environment, error) {
	env := Environment{
		Version:      r.opts.Version,
		Dev:          r.opts.Dev != nil,
		Endpoints:    r.opts.Endpoints,
		Via:          r.opts.Via,
		GOMAXPROCS:   runtime.GOMAXPROCS(0),
		NumCPU:       runtime.NumCPU(),
		CPUModel:     cpuModel(),
		GoVersion:    runtime.Version(),
		OS:           runtime.GOOS,
		Arch:         runtime.GOARCH,
		Date:         time.Now().UTC().Format(time.RFC3339),
		Duration:     r.opts.Duration.String(),
		Warmup:       r.opts.Warmup.String(),
		LoadAvgStart: loadAvg(),
		TLS:          len(r.opts.Endpoints) > 0 && strings.HasPrefix(r.opts.Endpoints[0], "https://"),
		Token:        r.opts.Token != "",
	}
	if r.opts.Dev != nil {
		d, err := syncLatency(r.opts.Dev.DataDir())
		if err != nil {
			return env, err
		}
		env.DiskSyncStartMs = ms(d)
	}
	c, err := client.New(r.opts.Endpoints, r.opts.clientOptions()...)
	if err != nil {
		return env, fmt.Errorf("bench: %w", err)
	}
	defer c.Close()
	cl, err := c.Raw().Cluster(ctx)
	if err != nil {
		return env, fmt.Errorf("bench: reading the cluster: %w", err)
	}
	env.ServerVersion, env.ClusterSize, env.LogStore = cl.Version, len(cl.Members), cl.LogStore
	return env, nil
}

// progress calls Options.Progress with status() about four times a second until the returned
// function is called, which clears the line.
func (r *runner) progress(status func(now time.Time) string) (stop func()) {
	if r.opts.Progress == nil {
		return func() {}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				r.opts.Progress("")
				return
			case now := <-t.C:
				r.opts.Progress(status(now))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// windowStatus is the progress line of a workload measured over w: label, phase and rate.
func windowStatus(label string, w window, now time.Time, count int64, unit string) string {
	if now.Before(w.start) {
		return fmt.Sprintf("%s: warming up, %.1fs left", label, w.start.Sub(now).Seconds())
	}
	if now.After(w.end) {
		now = w.end
	}
	el := now.Sub(w.start)
	rate := 0.0
	if el > 0 {
		rate = float64(count) / el.Seconds()
	}
	return fmt.Sprintf("%s: %.1fs/%.0fs  %d %s  %.0f/s", label, el.Seconds(), w.seconds(), count, unit, rate)
}

// isCancel reports whether err comes from ctx ending.
func isCancel(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.Canceled)
}

// loadAvg returns the 1, 5 and 15 minute load averages where /proc/loadavg tells them.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// withSteal runs run and returns its result with the share of the machine's CPU time that the
// hypervisor stole meanwhile (see stealDuring).
func withSteal[T any](run func() (T, error)) (res T, steal *float64, err error) {
	steal, err = stealDuring(func() (err error) {
		res, err = run()
		return err
	})
	return res, steal, err
}
