package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Metric names read from a node's /metrics.
const (
	metricCPU      = "process_cpu_seconds_total"
	metricRSS      = "process_resident_memory_bytes"
	metricSessions = "raftlock_sessions"
	metricExpiries = "raftlock_session_expiries_total"
)

// scrapeMetrics reads the unlabelled samples of endpoint's /metrics (Prometheus text format).
func scrapeMetrics(ctx context.Context, hc *http.Client, endpoint string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(endpoint, "/")+"/metrics", nil)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics of %s: %w", endpoint, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("bench: metrics of %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: metrics of %s: status %s", endpoint, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics returns the samples without labels of a Prometheus text exposition.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := make(map[string]float64)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			continue
		}
		out[fields[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bench: reading metrics: %w", err)
	}
	return out, nil
}
