package jepsen

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/raftlock/raftlock/jepsen/checker"
	"github.com/raftlock/raftlock/jepsen/history"
)

// Report is the outcome of a run.
type Report struct {
	// Config is the run's configuration.
	Config Config
	// Counts are the operations per kind and outcome.
	Counts map[history.Kind]map[history.Type]int
	// NemesisLog lists the recorded fault actions, in order.
	NemesisLog []string
	// Faults counts the faults injected, by name.
	Faults map[string]int
	// Results are the checkers' verdicts.
	Results []checker.Result
	// Passed and Failed count the verdicts.
	Passed, Failed int
	// HistoryPath is the JSON lines history.
	HistoryPath string
	// HTMLPath is porcupine's visualisation, annotated with the faults ("" if not written).
	HTMLPath string
	// NodeLogs are the agents' log files.
	NodeLogs []string
}

// Valid reports whether every checker passed.
func (r *Report) Valid() bool { return r.Failed == 0 && r.Passed > 0 }

// Result returns the named checker's verdict.
func (r *Report) Result(name string) (checker.Result, bool) {
	for _, res := range r.Results {
		if res.Name == name {
			return res, true
		}
	}
	return checker.Result{}, false
}

func (r *Report) fill(ops []history.Op, results []checker.Result) {
	r.Counts = map[history.Kind]map[history.Type]int{}
	for _, op := range ops {
		if op.Kind == history.Nemesis && op.Action == history.ActionStart {
			if r.Faults == nil {
				r.Faults = map[string]int{}
			}
			r.Faults[op.Fault]++
		}
		if op.Kind == history.Nemesis {
			r.NemesisLog = append(r.NemesisLog, fmt.Sprintf("%8.3fs %-12s %-5s #%-3d %s", float64(op.Invoke)/1e9,
				op.Fault, op.Action, op.FaultID, nemesisDetail(op)))
			continue
		}
		if r.Counts[op.Kind] == nil {
			r.Counts[op.Kind] = map[history.Type]int{}
		}
		r.Counts[op.Kind][op.Type]++
	}
	r.Results = results
	r.Passed, r.Failed = checker.Tally(results)
}

// faultCounts renders how many times each fault was injected.
func (r *Report) faultCounts() string {
	if len(r.Faults) == 0 {
		return "none"
	}
	names := make([]string, 0, len(r.Faults))
	for f := range r.Faults {
		names = append(names, f)
	}
	sort.Strings(names)
	var parts []string
	for _, f := range names {
		parts = append(parts, fmt.Sprintf("%s %d", f, r.Faults[f]))
	}
	return strings.Join(parts, ", ")
}

func nemesisDetail(op history.Op) string {
	if op.Error != "" {
		return op.Detail + " (error: " + op.Error + ")"
	}
	return op.Detail
}

// Print writes the summary: seed and configuration, operation counts, the nemesis log, one line
// per checker (with quoted violations), the artifacts, and last the line "N passed, M failed".
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\n== jepsen summary\nseed: %d\nconfig: %s\n", r.Config.Seed, r.Config)
	fmt.Fprintln(w, "\noperations (ok / fail / unknown):")
	kinds := make([]string, 0, len(r.Counts))
	for k := range r.Counts {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	var tot [3]int
	for _, k := range kinds {
		c := r.Counts[history.Kind(k)]
		fmt.Fprintf(w, "  %-18s %6d / %6d / %6d\n", k, c[history.OK], c[history.Fail], c[history.Info])
		tot[0], tot[1], tot[2] = tot[0]+c[history.OK], tot[1]+c[history.Fail], tot[2]+c[history.Info]
	}
	fmt.Fprintf(w, "  %-18s %6d / %6d / %6d\n", "total", tot[0], tot[1], tot[2])
	fmt.Fprintf(w, "\nfaults injected: %s\n", r.faultCounts())
	fmt.Fprintf(w, "\nnemesis log (%d actions):\n", len(r.NemesisLog))
	for _, l := range r.NemesisLog {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintln(w, "\ncheckers:")
	for _, res := range r.Results {
		fmt.Fprintln(w, "  "+strings.ReplaceAll(res.String(), "\n", "\n  "))
	}
	fmt.Fprintln(w, "\nartifacts:")
	fmt.Fprintf(w, "  history:       %s\n", r.HistoryPath)
	if r.HTMLPath != "" {
		fmt.Fprintf(w, "  visualisation: %s\n", r.HTMLPath)
	}
	for _, l := range r.NodeLogs {
		fmt.Fprintf(w, "  node log:      %s\n", l)
	}
	fmt.Fprintf(w, "\n%d passed, %d failed\n", r.Passed, r.Failed)
}
