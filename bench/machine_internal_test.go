package bench

import (
	"math"
	"path/filepath"
	"testing"
)

func TestParseCPUTimes(t *testing.T) {
	stat := []byte("cpu  841387 0 137670 6667934 91975 0 30986 110176 5 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	got, err := parseCPUTimes(stat)
	if err != nil {
		t.Fatal(err)
	}
	// guest (5) is already inside user, so the total stops at steal.
	want := cpuTimes{total: 841387 + 137670 + 6667934 + 91975 + 30986 + 110176, steal: 110176}
	if got != want {
		t.Errorf("parseCPUTimes = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3", "cpu 1 2 3 4 5 6 7 x"} {
		if _, err := parseCPUTimes([]byte(bad)); err == nil {
			t.Errorf("parseCPUTimes(%q) succeeded", bad)
		}
	}
}

func TestStealPercent(t *testing.T) {
	pct, ok := stealPercent(cpuTimes{total: 1000, steal: 10}, cpuTimes{total: 1400, steal: 60})
	if !ok || math.Abs(pct-12.5) > 1e-9 {
		t.Errorf("stealPercent = %v, %v; want 12.5, true", pct, ok)
	}
	if _, ok := stealPercent(cpuTimes{total: 1000}, cpuTimes{total: 1000}); ok {
		t.Error("stealPercent over no time succeeded")
	}
}

func TestSyncLatency(t *testing.T) {
	d, err := syncLatency(t.TempDir())
	if err != nil || d <= 0 {
		t.Fatalf("syncLatency = %v, %v; want a positive duration", d, err)
	}
	if _, err := syncLatency(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("syncLatency in a missing directory succeeded")
	}
}

func TestParseCPUModel(t *testing.T) {
	info := []byte("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu\n\nprocessor\t: 1\nmodel name\t: Other\n")
	if got := parseCPUModel(info); got != "Intel(R) Xeon(R) Processor" {
		t.Errorf("parseCPUModel = %q", got)
	}
	if got := parseCPUModel([]byte("processor\t: 0\n")); got != "" {
		t.Errorf("parseCPUModel without a model name = %q", got)
	}
}
