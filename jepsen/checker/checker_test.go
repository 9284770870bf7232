package checker

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen/history"
)

// Every checker must pass its good histories and flag its broken ones.
func TestSyntheticCases(t *testing.T) {
	for _, c := range SyntheticCases() {
		t.Run(c.Name, func(t *testing.T) {
			r := c.Run()
			if r.Valid != c.Valid {
				t.Fatalf("want valid=%v, got:\n%s", c.Valid, r)
			}
			if !r.Valid && len(r.Examples) == 0 {
				t.Fatalf("a violation must quote an example:\n%s", r)
			}
		})
	}
}

func TestSyntheticCasesCoverEveryChecker(t *testing.T) {
	names := map[string][2]int{}
	for _, c := range SyntheticCases() {
		r := c.Run()
		n := names[r.Name]
		if c.Valid {
			n[0]++
		} else {
			n[1]++
		}
		names[r.Name] = n
	}
	for _, want := range []string{"linearizable", "fencing", "token-order", "durability", "expiry", "liveness", "convergence", "belief", "held-by-nobody", "watch", "semaphore", "rwlock", "operator"} {
		if n := names[want]; n[0] == 0 || n[1] == 0 {
			t.Errorf("checker %s has %d good and %d broken synthetic histories; want at least one of each", want, n[0], n[1])
		}
	}
}

func TestVisualisationIsWritten(t *testing.T) {
	ops := handover().ops
	ops = append(ops, history.Op{ID: len(ops), Kind: history.Nemesis, Fault: "kill", Action: history.ActionStart,
		FaultID: 1, Detail: "n1", Invoke: ms(15), Complete: ms(16)})
	l := CheckLinearizable(ops, DefaultConfig(2*time.Second))
	path := filepath.Join(t.TempDir(), "lin.html")
	if err := l.WriteHTML(path, history.Faults(ops)); err != nil {
		t.Fatal(err)
	}
}

func TestHoldWindows(t *testing.T) {
	b := (&syn{}).create(s1, 0, 5).
		acquire(s1, "a", 5, 10, 20).release(s1, "a", 5, history.OK, 30, 40).
		renew(s1, history.OK, 50, 60).
		add(history.Op{Kind: history.Acquire, Type: history.Info, Session: s1, Lock: "a"}, 70, 80).
		renew(s1, history.OK, 90, 100)
	w := newHoldWindows(b.ops)
	if !w.covers("a", s1, ms(15), ms(16)) || w.covers("a", s1, ms(50), ms(60)) {
		t.Fatalf("windows wrong: %v", w)
	}
	if !w.covers("a", s1, ms(90), ms(100)) {
		t.Fatalf("a lost acquire keeps the window open to the session's last op: %v", w)
	}
}

// A long history is checked in segments; a segment that starts while the lock is held must
// accept the release, and a violation inside a later segment must still be found.
func TestSegmentsStartFromAnyHolder(t *testing.T) {
	b := (&syn{}).read("a", "", 0, 0, 1)
	var at int64 = 10
	for i := 0; i < 1100; i++ {
		tok := uint64(2*i + 1)
		b.acquire(s1, "a", tok, at, at+1).release(s1, "a", tok, history.OK, at+2, at+3)
		at += 4
	}
	r := CheckLinearizable(b.ops, DefaultConfig(2*time.Second)).Result
	if !r.Valid || !strings.Contains(r.Figures, "3 segments") {
		t.Fatalf("want a valid history in 3 segments: %s", r)
	}
	b.release(s1, "a", 2199, history.OK, at, at+1).read("a", s1, 2199, at+2, at+3)
	if r := CheckLinearizable(b.ops, DefaultConfig(2*time.Second)).Result; r.Valid {
		t.Fatalf("a release undone in the last segment must be flagged: %s", r)
	}
}
