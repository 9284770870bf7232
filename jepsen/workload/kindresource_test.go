package workload

import (
	"testing"

	"github.com/raftlock/raftlock/jepsen/history"
)

// A semaphore's resource accepts up to its limit of writers, and a token below all of the
// limit highest it accepted no more; a read/write lock's accepts a write only from a token at
// least every one it accepted, and a read only from one at least the last write's.
func TestKindResourceRules(t *testing.T) {
	r := NewKindResource(history.NewRecorder(nil), false)
	p := func(tok uint64) bool { return r.Access(0, "s", "x", history.APIPermit, 2, tok, false) }
	for _, step := range []struct {
		tok  uint64
		want bool
	}{{5, true}, {7, true}, {5, true}, {9, true}, {5, false}, {7, true}, {6, false}, {11, true}, {7, false}, {9, true}} {
		if got := p(step.tok); got != step.want {
			t.Fatalf("semaphore of 2: token %d accepted %v, want %v", step.tok, got, step.want)
		}
	}
	read := func(tok uint64) bool { return r.Access(0, "rw", "x", history.APIShared, 0, tok, false) }
	write := func(tok uint64) bool { return r.Access(0, "rw", "x", history.APIExclusive, 0, tok, false) }
	for i, step := range []struct {
		ok   func(uint64) bool
		tok  uint64
		want bool
	}{{read, 5, true}, {read, 4, true}, {write, 4, false}, {write, 8, true}, {read, 6, false}, {read, 9, true},
		{write, 8, false}, {read, 8, true}, {write, 10, true}, {read, 9, false}} {
		if got := step.ok(step.tok); got != step.want {
			t.Fatalf("read/write step %d: token %d accepted %v, want %v", i, step.tok, got, step.want)
		}
	}
}
