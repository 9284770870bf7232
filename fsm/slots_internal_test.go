package fsm

import (
	"math/rand"
	"slices"
	"testing"
)

// TestSlotViewsStayAsCaptured fills a slot table over several chunks, captures views of it
// between rounds of random adds, replacements and removals, and checks that every view still
// shows what the table held when it was taken, that the table holds what a plain map of
// positions says, and that freed positions are reused.
func TestSlotViewsStayAsCaptured(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	var tab slots[int]
	model := map[uint32]*int{} // position -> entry
	var used []uint32          // the positions in model
	gen := uint64(0)
	type capture struct {
		view slotView[int]
		want []*int
	}
	var views []capture
	contents := func() []*int {
		var out []*int
		for pos := range tab.end {
			if p := model[pos]; p != nil {
				out = append(out, p)
			}
		}
		return out
	}
	next, peak := 0, 0
	for round := range 8 {
		for range 3 * slotChunkLen {
			switch op := rng.Intn(4); {
			case op <= 1 || len(model) == 0:
				next++
				v := next
				pos := tab.add(gen, &v)
				if model[pos] != nil {
					t.Fatalf("round %d: add returned position %d, which holds an entry", round, pos)
				}
				model[pos] = &v
				used = append(used, pos)
				peak = max(peak, len(used))
			default:
				k := rng.Intn(len(used))
				pos := used[k]
				if op == 2 {
					next++
					v := next
					tab.set(gen, pos, &v)
					model[pos] = &v
				} else {
					tab.remove(gen, pos)
					delete(model, pos)
					used[k] = used[len(used)-1]
					used = used[:len(used)-1]
				}
			}
		}
		if got, want := tab.view().appendTo(nil), contents(); !slices.Equal(got, want) {
			t.Fatalf("round %d: the table holds %d entries, the model %d", round, len(got), len(want))
		}
		views = append(views, capture{tab.view(), contents()})
		gen++
		for i, c := range views {
			if got := c.view.appendTo(nil); !slices.Equal(got, c.want) {
				t.Fatalf("round %d: view %d changed after it was taken (%d entries, took %d)", round, i, len(got), len(c.want))
			}
		}
	}
	if len(tab.chunks) < 3 {
		t.Fatalf("the test used %d chunks; it must cross chunk boundaries", len(tab.chunks))
	}
	if int(tab.end) != peak {
		t.Fatalf("the table used %d positions for at most %d entries at once: freed ones are not reused", tab.end, peak)
	}
}
