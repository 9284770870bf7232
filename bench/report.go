package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Report is the outcome of Run: the environment and the figures of each workload that ran.
type Report struct {
	Environment Environment         `json:"environment"`
	Uncontended []UncontendedResult `json:"uncontended,omitempty"`
	Contended   []ContendedResult   `json:"contended,omitempty"`
	Semaphore   []SemaphoreResult   `json:"semaphore,omitempty"`
	RWLock      []RWResult          `json:"rwlock,omitempty"`
	Sessions    *SessionsResult     `json:"sessions,omitempty"`
	Failover    *FailoverResult     `json:"failover,omitempty"`
	Watch       *WatchResult        `json:"watch,omitempty"`
	// WatchStream is the watch workload with streams; Watch is it with polls.
	WatchStream *WatchResult `json:"watch_stream,omitempty"`
}

// Environment says where the figures come from.
type Environment struct {
	// Version is the bench binary's version, ServerVersion the cluster's.
	Version       string `json:"version"`
	ServerVersion string `json:"server_version"`
	ClusterSize   int    `json:"cluster_size"`
	// LogStore is the Raft log store of the node that answered, as GET /v1/cluster says.
	LogStore string `json:"log_store"`
	// Dev is set when the cluster ran inside the bench process.
	Dev       bool     `json:"dev"`
	Endpoints []string `json:"endpoints"`
	// TLS is set when the endpoints are https; Token when the clients sent an ACL token.
	TLS        bool   `json:"tls"`
	Token      bool   `json:"token"`
	Via        string `json:"via"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NumCPU     int    `json:"num_cpu"`
	CPUModel   string `json:"cpu_model,omitempty"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	Date       string `json:"date"`
	Duration   string `json:"duration"`
	Warmup     string `json:"warmup"`
	// LoadAvg is the machine's load average (1, 5, 15 minutes) as the run started and as it
	// ended, where the OS tells it: other work on the machine skews every figure.
	LoadAvgStart string `json:"load_avg_start,omitempty"`
	LoadAvgEnd   string `json:"load_avg_end,omitempty"`
	// StealPercent is the share of the machine's CPU time during the run that the hypervisor
	// gave to other guests, where the OS tells it. A virtual machine's load average does not
	// show them, and its figures drop as they take its time.
	StealPercent *float64 `json:"steal_percent,omitempty"`
	// DiskSyncStartMs and DiskSyncEndMs are the median time to append 4 KiB to a file beside
	// the nodes' data and fsync it, before and after the workloads (--dev only): every commit
	// waits for two of them, and on a shared disk they vary from one hour to the next.
	DiskSyncStartMs float64 `json:"disk_sync_start_ms,omitempty"`
	DiskSyncEndMs   float64 `json:"disk_sync_end_ms,omitempty"`
}

// Violations lists what must never happen and did: overlapping holds, tokens that did not
// grow, lost sessions, failovers after which no acquire succeeded.
func (r *Report) Violations() []string {
	var out []string
	for _, u := range r.Uncontended {
		for _, v := range u.Violations {
			out = append(out, fmt.Sprintf("uncontended C=%d: %s", u.Clients, v))
		}
	}
	for _, c := range r.Contended {
		if c.Overlaps > 0 || c.TokenRegressions > 0 {
			out = append(out, fmt.Sprintf("contended C=%d: %d overlapping grants, %d token regressions (first: %s)",
				c.Clients, c.Overlaps, c.TokenRegressions, strings.Join(c.Violations, "; ")))
		}
	}
	for _, x := range r.Semaphore {
		if x.Overflows > 0 || x.DuplicateTokens > 0 {
			out = append(out, fmt.Sprintf("semaphore C=%d: %d grants over the limit %d, %d duplicate tokens (first: %s)",
				x.Clients, x.Overflows, x.Limit, x.DuplicateTokens, strings.Join(x.Violations, "; ")))
		}
	}
	for _, x := range r.RWLock {
		if x.Overlaps > 0 || x.DuplicateTokens > 0 {
			out = append(out, fmt.Sprintf("rwlock C=%d: %d overlapping grants, %d duplicate tokens (first: %s)",
				x.Clients, x.Overlaps, x.DuplicateTokens, strings.Join(x.Violations, "; ")))
		}
	}
	if s := r.Sessions; s != nil && (s.Lost > 0 || s.DeadlineMissed > 0 || s.ServerExpiries > 0) {
		out = append(out, fmt.Sprintf("sessions: %d lost, %d missed their deadline, %.0f expired on the server",
			s.Lost, s.DeadlineMissed, s.ServerExpiries))
	}
	if f := r.Failover; f != nil && f.Failed > 0 {
		out = append(out, fmt.Sprintf("failover: %d of %d trials never recovered", f.Failed, len(f.Trials)))
	}
	for _, w := range []*WatchResult{r.WatchStream, r.Watch} {
		if w != nil && (w.Missed > 0 || w.OutOfOrder > 0 || w.Resets > 0 || w.Dropped > 0) {
			out = append(out, fmt.Sprintf("watch (%s): %d deliveries missed, %d out of order, %d resets, %d streams dropped",
				w.Mode, w.Missed, w.OutOfOrder, w.Resets, w.Dropped))
		}
	}
	return out
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("bench: writing JSON: %w", err)
	}
	return nil
}

// WriteTable writes the report as aligned text tables, one per workload.
func (r *Report) WriteTable(out io.Writer) error {
	e := r.Environment
	where := "a cluster of"
	if e.Dev {
		where = "an in-process (--dev) cluster of"
	}
	security := "plain HTTP"
	if e.TLS {
		security = "TLS"
	}
	if e.Token {
		security += ", ACL token"
	}
	fmt.Fprintf(out, "raftlock bench %s against %s %d nodes (server %s, log store %s, %s), requests sent first to the %s\n",
		e.Version, where, e.ClusterSize, e.ServerVersion, e.LogStore, security, viaWords(e.Via))
	cpus := fmt.Sprintf("%d CPUs", e.NumCPU)
	if e.CPUModel != "" {
		cpus += " (" + e.CPUModel + ")"
	}
	fmt.Fprintf(out, "%s %s/%s, GOMAXPROCS %d, %s, %s; each figure over %s after %s of warm-up\n",
		e.GoVersion, e.OS, e.Arch, e.GOMAXPROCS, cpus, e.Date, e.Duration, e.Warmup)
	if e.LoadAvgStart != "" {
		fmt.Fprintf(out, "load average %s at the start, %s at the end\n", e.LoadAvgStart, e.LoadAvgEnd)
	}
	if e.DiskSyncStartMs > 0 {
		end := ""
		if e.DiskSyncEndMs > 0 {
			end = ", " + msStr(e.DiskSyncEndMs) + " at the end"
		}
		fmt.Fprintf(out, "a 4 KiB append + fsync beside the nodes' data took %s (median) at the start%s\n",
			msStr(e.DiskSyncStartMs), end)
	}
	if e.StealPercent != nil {
		fmt.Fprintf(out, "%.1f %% of the machine's CPU time was stolen by the hypervisor during the run\n", *e.StealPercent)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	if len(r.Uncontended) > 0 {
		fmt.Fprintf(tw, "\nuncontended\tclients\tops/s\tserver CPU/op\tacquire p50\tp99\tmax\trelease p50\tp99\tmax\terrors\tsteal\n")
		for _, u := range r.Uncontended {
			fmt.Fprintf(tw, "\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", u.Clients, u.OpsPerSec, usStr(u.ServerCPUMicros),
				msStr(u.Acquire.P50), msStr(u.Acquire.P99), msStr(u.Acquire.Max),
				msStr(u.Release.P50), msStr(u.Release.P99), msStr(u.Release.Max), u.Errors, pctStr(u.StealPercent))
		}
	}
	if len(r.Contended) > 0 {
		fmt.Fprintf(tw, "\ncontended\tclients\tgrants/s\tserver CPU/op\thandoff p50\tp99\tmax\tfrom send p50\tp99\tfairness\tfifo inv.\toverlaps\ttoken regr.\terrors\tsteal\n")
		for _, c := range r.Contended {
			fmt.Fprintf(tw, "\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", c.Clients, c.GrantsPerSec, usStr(c.ServerCPUMicros),
				msStr(c.Handoff.P50), msStr(c.Handoff.P99), msStr(c.Handoff.Max),
				msStr(c.HandoffFromSend.P50), msStr(c.HandoffFromSend.P99),
				fairness(c), c.FIFOInversions, c.Overlaps, c.TokenRegressions, c.Errors, pctStr(c.StealPercent))
		}
	}
	if len(r.Semaphore) > 0 {
		fmt.Fprintf(tw, "\nsemaphore\tclients\tlimit\tgrants/s\tserver CPU/op\twait p50\tp99\tmax\tmost holders\tover limit\tdup. tokens\terrors\tsteal\n")
		for _, x := range r.Semaphore {
			fmt.Fprintf(tw, "\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", x.Clients, x.Limit, x.GrantsPerSec,
				usStr(x.ServerCPUMicros), msStr(x.Wait.P50), msStr(x.Wait.P99), msStr(x.Wait.Max), x.MostHolders,
				x.Overflows, x.DuplicateTokens, x.Errors, pctStr(x.StealPercent))
		}
	}
	if len(r.RWLock) > 0 {
		fmt.Fprintf(tw, "\nrwlock\tclients\twriters\treads/s\twrites/s\tserver CPU/op\tread wait p50\tp99\twrite wait p50\tp99\tmax\tmost readers\toverlaps\tdup. tokens\terrors\tsteal\n")
		for _, x := range r.RWLock {
			fmt.Fprintf(tw, "\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", x.Clients, x.Writers,
				x.ReadsPerSec, x.WritesPerSec, usStr(x.ServerCPUMicros), msStr(x.ReadWait.P50), msStr(x.ReadWait.P99),
				msStr(x.WriteWait.P50), msStr(x.WriteWait.P99), msStr(x.WriteWait.Max), x.MostReaders, x.Overlaps,
				x.DuplicateTokens, x.Errors, pctStr(x.StealPercent))
		}
	}
	if s := r.Sessions; s != nil {
		fmt.Fprintf(tw, "\nsessions\tsessions\tcreated/s\trenewals/s (need)\trenew p99\tlost\tlate\tleader CPU\tleader RSS\terrors\n")
		fmt.Fprintf(tw, "\t%d\t%.0f\t%.0f (%.0f)\t%s\t%d\t%d\t%.1f%% (%.1fs)\t%.0f MB\t%d\n", s.Created,
			s.CreatesPerSec, s.RenewalsPerSec, s.ExpectedRenewalsPerSec, msStr(s.RenewLatency.P99),
			s.Lost+s.DeadlineMissed, s.Late, s.LeaderCPUPercent, s.LeaderCPUSeconds, s.LeaderRSSBytes/1e6, s.Errors)
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(tw, "\nfailover\ttrials\trecovery p50\tmax\telection p50\tmax\tfailed\n")
		if f.Skipped != "" {
			fmt.Fprintf(tw, "\tskipped: %s\n", f.Skipped)
		} else {
			fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t%s\t%d\n", len(f.Trials), msStr(f.Recovery.P50),
				msStr(f.Recovery.Max), msStr(f.Election.P50), msStr(f.Election.Max), f.Failed)
		}
	}
	r.WatchStream.writeTable(tw)
	r.Watch.writeTable(tw)
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("bench: writing table: %w", err)
	}
	r.writeNotes(out)
	return nil
}

// writeNotes explains the figures that need it and lists violations and error samples.
func (r *Report) writeNotes(out io.Writer) {
	var notes []string
	if len(r.Semaphore) > 0 || len(r.RWLock) > 0 {
		notes = append(notes, "semaphore, rwlock = clients on one semaphore (or read/write lock, an eighth of them writing), each giving it back as soon as it is granted; wait = acquire sent -> grant received; server CPU/op per grant")
	}
	if len(r.Uncontended) > 0 || len(r.Contended) > 0 || len(r.Semaphore) > 0 || len(r.RWLock) > 0 {
		cpu := "server CPU/op = CPU time of all server processes (process_cpu_seconds_total of every member's /metrics) over the window, per acquire+release (per grant when contended)"
		if r.Environment.Dev {
			cpu += "; the in-process cluster shares this process, so it includes the load generator"
		}
		notes = append(notes, cpu)
		notes = append(notes, "steal = the machine's CPU time the hypervisor gave to other guests during the row (from /proc/stat); figures taken under steal are low")
	}
	if len(r.Contended) > 0 {
		notes = append(notes, "handoff = release acknowledged -> next holder's grant received (0 when the grant came first), from send = release sent -> next grant received; fairness = max/min grants per client; fifo inv. = grants to a client that asked >5ms after one still waiting")
	}
	if s := r.Sessions; s != nil {
		notes = append(notes, fmt.Sprintf("sessions: TTL %s renewed at TTL/3 by %d workers; created in %.1fs, destroyed in %.1fs; longest renewal gap %s, worst lateness %s",
			s.TTL, s.Workers, s.CreateSeconds, s.DestroySeconds, msStr(s.MaxGapMs), msStr(s.MaxRenewDelayMs)))
		if s.Note != "" {
			notes = append(notes, "sessions: "+s.Note)
		}
		if s.LiveAtFirstLoss > 0 {
			notes = append(notes, fmt.Sprintf("sessions: the first loss was detected with %d sessions live (losses show up to a TTL late)", s.LiveAtFirstLoss))
		}
		if s.GaveUp != "" {
			notes = append(notes, "sessions: "+s.GaveUp)
		}
	}
	if f := r.Failover; f != nil {
		for i, t := range f.Trials {
			if t.Error != "" {
				notes = append(notes, fmt.Sprintf("failover trial %d: killed %s: %s", i+1, t.Killed, t.Error))
				continue
			}
			note := fmt.Sprintf("failover trial %d: killed %s, %s led after %s, acquire granted after %s (%d attempts)",
				i+1, t.Killed, t.NewLeader, msStr(t.ElectionMs), msStr(t.RecoveryMs), t.Attempts)
			switch {
			case t.RestartedPID != 0:
				note += fmt.Sprintf("; pid %d, restarted as pid %d writing to %s", t.KilledPID, t.RestartedPID, t.RestartLog)
			case t.KilledPID != 0:
				note += fmt.Sprintf("; pid %d, restarted by its supervisor", t.KilledPID)
			}
			notes = append(notes, note)
		}
	}
	notes = append(notes, r.WatchStream.notes(r.Environment.Dev)...)
	notes = append(notes, r.Watch.notes(r.Environment.Dev)...)
	for _, s := range r.errorSamples() {
		notes = append(notes, "error: "+s)
	}
	for _, v := range r.Violations() {
		notes = append(notes, "VIOLATION: "+v)
	}
	if len(notes) > 0 {
		fmt.Fprintln(out)
	}
	for _, n := range notes {
		fmt.Fprintln(out, n)
	}
}

// errorSamples lists every workload's error samples, each after the run it came from.
func (r *Report) errorSamples() []string {
	var out []string
	add := func(run string, samples []string) {
		for _, s := range samples {
			out = append(out, run+": "+s)
		}
	}
	for _, u := range r.Uncontended {
		add(fmt.Sprintf("uncontended C=%d", u.Clients), u.ErrorSamples)
	}
	for _, c := range r.Contended {
		add(fmt.Sprintf("contended C=%d", c.Clients), c.ErrorSamples)
	}
	for _, x := range r.Semaphore {
		add(fmt.Sprintf("semaphore C=%d", x.Clients), x.ErrorSamples)
	}
	for _, x := range r.RWLock {
		add(fmt.Sprintf("rwlock C=%d", x.Clients), x.ErrorSamples)
	}
	if s := r.Sessions; s != nil {
		add("sessions", s.ErrorSamples)
	}
	if w := r.Watch; w != nil {
		add("watch", w.ErrorSamples)
	}
	if w := r.WatchStream; w != nil {
		add("watch (streams)", w.ErrorSamples)
	}
	return out
}

func viaWords(via string) string {
	switch via {
	case ViaLeader:
		return "leader"
	case ViaFollower:
		return "a follower (writes are forwarded)"
	}
	return "first endpoint given"
}

func fairness(c ContendedResult) string {
	if c.MinGrants == 0 {
		return fmt.Sprintf("inf (%d/0)", c.MaxGrants)
	}
	return fmt.Sprintf("%.2f", c.Fairness)
}

// usStr formats microseconds of CPU per operation, or "?" when unknown.
func usStr(v *float64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.0fµs", *v)
}

// msStr formats milliseconds with a precision that suits their size.
func msStr(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.2fms", v)
	case v < 1000:
		return fmt.Sprintf("%.1fms", v)
	}
	return fmt.Sprintf("%.2fs", v/1000)
}

// pctStr renders a percentage that may be unknown.
func pctStr(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", *p)
}
