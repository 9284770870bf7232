package history

import (
	"bytes"
	"sync"
	"testing"
)

func TestRecorderNumbersOpsAndStreamsJSONLines(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				inv := r.Now()
				r.Add(Op{Process: p, Kind: Acquire, Type: OK, Invoke: inv, Lock: "a", OutToken: uint64(i + 1)})
			}
		}(p)
	}
	wg.Wait()
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	ops := r.Ops()
	if len(ops) != 200 {
		t.Fatalf("recorded %d ops, want 200", len(ops))
	}
	for i, op := range ops {
		if op.ID != i {
			t.Fatalf("op %d has id %d", i, op.ID)
		}
		if op.Complete < op.Invoke {
			t.Fatalf("op %d completes before it is invoked: %v", i, op)
		}
	}
	back, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(ops) || back[57] != ops[57] {
		t.Fatalf("JSON lines round trip lost ops: %d vs %d", len(back), len(ops))
	}
}

func TestFaultsPairsStartAndStop(t *testing.T) {
	ops := []Op{
		{Kind: Nemesis, Fault: "kill", Action: ActionStart, FaultID: 1, Invoke: 10, Complete: 11, Detail: "n1"},
		{Kind: Acquire, Invoke: 12, Complete: 40},
		{Kind: Nemesis, Fault: "pause", Action: ActionStart, FaultID: 2, Invoke: 15, Complete: 16},
		{Kind: Nemesis, Fault: "kill", Action: ActionStop, FaultID: 1, Invoke: 20, Complete: 25},
	}
	got := Faults(ops)
	if len(got) != 2 {
		t.Fatalf("got %d intervals", len(got))
	}
	if got[0].Fault != "kill" || got[0].Start != 10 || got[0].End != 25 || got[0].Detail != "n1" {
		t.Fatalf("kill interval wrong: %+v", got[0])
	}
	if got[1].Fault != "pause" || got[1].End != 40 {
		t.Fatalf("unstopped pause must last to the end of the history: %+v", got[1])
	}
}
