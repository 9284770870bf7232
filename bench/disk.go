package bench

import (
	"fmt"
	"os"
	"slices"
	"time"
)

// syncSamples is how many appends syncLatency times.
const syncSamples = 64

// syncLatency returns the median time to append 4 KiB to a file in dir and fsync it, the step
// that each log store takes on the leader and again on a follower before a command commits.
func syncLatency(dir string) (time.Duration, error) {
	f, err := os.CreateTemp(dir, "bench-sync-")
	if err != nil {
		return 0, fmt.Errorf("bench: disk probe: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	block := make([]byte, 4096)
	took := make([]time.Duration, syncSamples)
	for i := range took {
		start := time.Now()
		if _, err := f.Write(block); err != nil {
			return 0, fmt.Errorf("bench: disk probe: %w", err)
		}
		if err := f.Sync(); err != nil {
			return 0, fmt.Errorf("bench: disk probe: %w", err)
		}
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	return took[len(took)/2], nil
}
