package workload

import "testing"

// Every op's process id belongs to one process: the watchers and the semaphore and rwlock
// workers were once given the same ids, which mixed their histories.
func TestProcessesAreDistinct(t *testing.T) {
	c := Config{Workers: 4, Locks: []string{"a", "b", "c"}, Watchers: 3, SemaphoreWorkers: 2, RWWorkers: 2}
	seen := map[int]bool{}
	for _, p := range c.Processes() {
		if seen[p] {
			t.Fatalf("process id %d given twice: %v", p, c.Processes())
		}
		seen[p] = true
	}
	if want := c.Workers + 2*len(c.Locks) + 1 + c.Watchers + c.kindWorkers(); len(seen) != want {
		t.Fatalf("%d process ids, want %d: %v", len(seen), want, c.Processes())
	}
}
