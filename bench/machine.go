package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// cpuTimes is the machine's CPU time so far, in clock ticks, from the "cpu" line of
// /proc/stat: all of it, and what the hypervisor gave to other guests (steal).
type cpuTimes struct {
	total, steal uint64
}

// readCPUTimes reads the machine's CPU times; ok is false where /proc/stat does not tell them.
func readCPUTimes() (t cpuTimes, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t, false
	}
	t, err = parseCPUTimes(b)
	return t, err == nil
}

// parseCPUTimes parses the first line of /proc/stat: "cpu user nice system idle iowait irq
// softirq steal guest guest_nice". guest time is already counted in user and nice, so the
// total is the first eight fields.
func parseCPUTimes(stat []byte) (cpuTimes, error) {
	line, _, _ := bytes.Cut(stat, []byte("\n"))
	sc := bufio.NewScanner(bytes.NewReader(line))
	sc.Split(bufio.ScanWords)
	if !sc.Scan() || sc.Text() != "cpu" {
		return cpuTimes{}, fmt.Errorf("bench: /proc/stat does not start with the cpu line: %q", line)
	}
	var t cpuTimes
	for i := 0; i < 8; i++ {
		if !sc.Scan() {
			return cpuTimes{}, fmt.Errorf("bench: /proc/stat cpu line has %d fields, want 8: %q", i, line)
		}
		v, err := strconv.ParseUint(sc.Text(), 10, 64)
		if err != nil {
			return cpuTimes{}, fmt.Errorf("bench: /proc/stat cpu line: %w", err)
		}
		t.total += v
		if i == 7 {
			t.steal = v
		}
	}
	return t, nil
}

// stealPercent is the share of the machine's CPU time between from and to that the hypervisor
// gave to other guests; ok is false when no time passed.
func stealPercent(from, to cpuTimes) (pct float64, ok bool) {
	if to.total <= from.total || to.steal < from.steal {
		return 0, false
	}
	return 100 * float64(to.steal-from.steal) / float64(to.total-from.total), true
}

// stealDuring runs f and returns, where the OS tells it, the share of the machine's CPU time
// that the hypervisor gave to other guests while f ran.
func stealDuring(f func() error) (*float64, error) {
	from, fromOK := readCPUTimes()
	err := f()
	to, toOK := readCPUTimes()
	if !fromOK || !toOK {
		return nil, err
	}
	pct, ok := stealPercent(from, to)
	if !ok {
		return nil, err
	}
	return &pct, err
}

// cpuModel returns the processor's model name where /proc/cpuinfo tells it. The machines
// that run this project's benchmarks are not always the same kind.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	return parseCPUModel(b)
}

// parseCPUModel returns the first "model name" of a /proc/cpuinfo.
func parseCPUModel(cpuinfo []byte) string {
	for line := range bytes.Lines(cpuinfo) {
		key, value, ok := bytes.Cut(line, []byte(":"))
		if ok && string(bytes.TrimSpace(key)) == "model name" {
			return string(bytes.TrimSpace(value))
		}
	}
	return ""
}
