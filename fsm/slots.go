package fsm

// slotBits sets the length of a slot chunk: 1,024 pointers, 8 KiB.
const slotBits = 10

const slotChunkLen = 1 << slotBits

// slots keeps pointers at stable positions, in fixed-size chunks, so that a snapshot can
// share it: a capture copies one pointer per chunk (view), and a write to a chunk made before
// the state's current generation copies the chunk first. So a capture of 1,000,000 locks
// copies about a thousand pointers, however busy the garbage collector is. Like a Go map, a
// table never shrinks: freed positions are reused, and cost about 12 bytes each while unused.
type slots[T any] struct {
	chunks []*slotChunk[T]
	gens   []uint64 // the state generation each chunk was made in; see set
	free   []uint32 // emptied positions, reused before the table grows
	end    uint32   // positions ever used
}

// slotChunk is one chunk of a slot table: exactly 8 KiB, an allocation size class.
type slotChunk[T any] [slotChunkLen]*T

// add puts p at a free position of generation gen and returns the position.
func (t *slots[T]) add(gen uint64, p *T) uint32 {
	var pos uint32
	if n := len(t.free); n > 0 {
		pos, t.free = t.free[n-1], t.free[:n-1]
	} else {
		pos = t.end
		t.end++
		if int(pos>>slotBits) == len(t.chunks) {
			t.chunks = append(t.chunks, new(slotChunk[T]))
			t.gens = append(t.gens, gen)
		}
	}
	t.set(gen, pos, p)
	return pos
}

// set puts p at pos, in generation gen. A chunk of an older generation may be in a snapshot
// being written, so it is replaced by a copy rather than changed.
func (t *slots[T]) set(gen uint64, pos uint32, p *T) {
	i := pos >> slotBits
	if t.gens[i] != gen {
		own := new(slotChunk[T])
		*own = *t.chunks[i]
		t.chunks[i], t.gens[i] = own, gen
	}
	t.chunks[i][pos&(slotChunkLen-1)] = p
}

// remove empties pos, in generation gen.
func (t *slots[T]) remove(gen uint64, pos uint32) {
	t.set(gen, pos, nil)
	t.free = append(t.free, pos)
}

// view returns the table as it is; the caller starts a new generation before the table
// changes again, so the view keeps showing this moment.
func (t *slots[T]) view() slotView[T] {
	return slotView[T](append([]*slotChunk[T](nil), t.chunks...))
}

// slotView is a slot table at one moment.
type slotView[T any] []*slotChunk[T]

// appendTo appends the pointers of v, in position order, to dst.
func (v slotView[T]) appendTo(dst []*T) []*T {
	for _, c := range v {
		for _, p := range c {
			if p != nil {
				dst = append(dst, p)
			}
		}
	}
	return dst
}
