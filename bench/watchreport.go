package bench

import (
	"fmt"
	"io"
	"strings"
)

// writeTable writes the watch workload's rows, if it ran.
func (w *WatchResult) writeTable(tw io.Writer) {
	if w == nil {
		return
	}
	fmt.Fprintf(tw, "\nwatch (%s)\twatchers\tconsistency\tchanges\tlast told p50\tp99\tmax\tmedian p50\tfirst p50\tserver CPU/change\tidle CPU (none)\tmissed\tout of order\tresets\terrors\tsteal\n", w.modeName())
	fmt.Fprintf(tw, "\t%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s (%s)\t%d\t%d\t%d\t%d\t%s\n", w.Watchers, w.Consistency, w.Changes,
		msStr(w.Last.P50), msStr(w.Last.P99), msStr(w.Last.Max), msStr(w.Median.P50), msStr(w.First.P50),
		msPtrStr(w.CPUPerChangeMs), pctStr(w.IdleCPUPercent), pctStr(w.BaseCPUPercent), w.Missed, w.OutOfOrder, w.Resets, w.Errors, pctStr(w.StealPercent))
	if w.Mode == WatchStream {
		fmt.Fprintf(tw, "\nwatch streams\tprefixes each\twatchings\tdropped\theap added per stream\tper watching\tanother client's acquires/s before\twith the streams idle\n")
		fmt.Fprintf(tw, "\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", w.Prefixes, w.Watchings, w.Dropped,
			bytesStr(w.HeapAddedPer(w.Watchers)), bytesStr(w.HeapAddedPer(w.Watchings)), rateStr(w.AcquireBefore), rateStr(w.AcquireWatching))
	}
	fmt.Fprintf(tw, "\nwatch memory\tnode\tRSS before\twith watchers\theap before\twith watchers\tgoroutines\tCPU during changes\n")
	for _, n := range w.Nodes {
		role := "follower"
		if n.Leader {
			role = "leader"
		}
		fmt.Fprintf(tw, "\t%s (%s)\t%s\t%s\t%s\t%s\t%.0f\t%.2fs\n", strings.TrimPrefix(strings.TrimPrefix(n.Endpoint, "http://"), "https://"), role,
			mib(n.RSSBefore), mib(n.RSSWatching), mib(n.HeapBefore), mib(n.HeapWatching), n.GoroutinesAfter, n.CPUChanges)
	}
}

// notes explains the watch workload's figures.
func (w *WatchResult) notes(dev bool) []string {
	if w == nil {
		return nil
	}
	if w.Mode == WatchStream {
		return []string{fmt.Sprintf("watch (streams): %d streams (Server-Sent Events) of %d prefixes each spread over the nodes (%s), open in %.1fs; %d changes, one at a time, each once every watcher was told of the last; "+
			"last told = change acknowledged -> the last watcher received it; server CPU/change = CPU of every node from the first change until every watcher was told of the last, per change; "+
			"heap added = every node's heap in use with the streams open minus before, per stream and per watching (stream x prefix); acquires/s = one other client's uncontended acquire+release pairs per second, before the streams and with them open and idle",
			w.Watchers, w.Prefixes, w.Consistency, w.ConnectSeconds, w.Changes)}
	}
	out := []string{fmt.Sprintf("watch: %d prefix watches spread over the nodes (%s), connected in %.1fs; %d changes, one at a time, each once every watcher waited again; "+
		"last told = change acknowledged -> the last watcher received it (median, first: half of them, the first); server CPU/change = CPU of every node from the first change until the watchers waited again after the last, per change (a few /metrics reads included); idle CPU = every node's CPU while all watched and nothing changed, in %% of one core (none: the same before the watchers connected)",
		w.Watchers, w.Consistency, w.ConnectSeconds, w.Changes)}
	if dev {
		out = append(out, "watch: the in-process cluster shares this process, so its CPU and memory include the watchers' own")
	}
	return out
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

// msPtrStr formats milliseconds that may be unknown.
func msPtrStr(v *float64) string {
	if v == nil {
		return "?"
	}
	return msStr(*v)
}

// modeName names the watchers' mode in the table.
func (w *WatchResult) modeName() string {
	if w.Mode == WatchStream {
		return "streams"
	}
	return "polls"
}

// HeapAddedPer is the heap every node added with the watchers waiting, divided by n.
func (w *WatchResult) HeapAddedPer(n int) float64 {
	if n <= 0 {
		return 0
	}
	added := 0.0
	for _, x := range w.Nodes {
		added += x.HeapWatching - x.HeapBefore
	}
	return added / float64(n)
}

// RSSAddedPer is the resident memory every node added with the watchers waiting, divided by n.
func (w *WatchResult) RSSAddedPer(n int) float64 {
	if n <= 0 {
		return 0
	}
	added := 0.0
	for _, x := range w.Nodes {
		added += x.RSSWatching - x.RSSBefore
	}
	return added / float64(n)
}

func bytesStr(b float64) string {
	if b < 10<<10 {
		return fmt.Sprintf("%.0f B", b)
	}
	return fmt.Sprintf("%.1f KiB", b/(1<<10))
}

func rateStr(v *float64) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprintf("%.0f", *v)
}
