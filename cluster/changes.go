package cluster

import (
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/raftlock/raftlock/fsm"
)

// DefaultWatchHistoryBytes bounds the memory of a node's change log (Config.WatchHistoryBytes):
// a change costs changeEntryBytes (160 bytes) plus its name and value, so about 85,000 changes
// of 30-byte names without values.
const DefaultWatchHistoryBytes = 16 << 20

// change is one entry of the change log: a lock's state right after the command that changed it.
type change struct {
	info fsm.LockView // info.ModifyIndex is the command's index
	size int          // what the entry costs, counted against the bound
}

// changeEntryBytes is what an entry costs besides its strings.
const changeEntryBytes = int(unsafe.Sizeof(change{}))

// changeLog remembers the latest lock changes this node applied, in log order and within a
// memory bound, so that a prefix watch can answer every change after a given index; it also
// wakes the watches of the prefixes a change falls under. It lives beside the state machine,
// never in the log or a snapshot: each node fills its own from the commands it applies, and
// knows every change after its floor. Older ones are gone (evicted, or before the snapshot the
// node restored), and a watch from before the floor is answered the whole prefix instead.
type changeLog struct {
	maxBytes int

	mu sync.RWMutex
	// chunks hold the changes after floor, in index order, from chunks[0][head:] on: fixed
	// blocks of changeChunk entries, so that appending never copies the log, and evicting
	// frees a block at a time.
	chunks [][]change
	head   int
	n      int // changes held
	spare  []change
	bytes  int
	floor  uint64 // every change after floor is in the log
	last   uint64 // every change up to last has been observed

	wmu     sync.Mutex
	watches map[string]chan struct{} // by prefix; closed at the next change of a lock under it
	lengths map[int]int              // how many prefixes in watches have each length
	closed  bool
}

func newChangeLog(maxBytes int) *changeLog {
	if maxBytes <= 0 {
		maxBytes = DefaultWatchHistoryBytes
	}
	return &changeLog{maxBytes: maxBytes, watches: make(map[string]chan struct{}), lengths: make(map[int]int)}
}

// observe records the lock changes among events and wakes the watches they concern.
func (cl *changeLog) observe(events []fsm.Event) {
	changed, restored := false, false
	cl.mu.Lock()
	for i := range events {
		switch e := &events[i]; e.Kind {
		case fsm.EventLockChanged:
			cl.appendLocked(e.State)
			changed = true
		case fsm.EventRestored:
			cl.restoreLocked(e.Index)
			restored = true
		default:
			// The observer gets a batch's events together: every change up to this one is
			// in, so watchers may go on from here, nearer the applied index.
			cl.last = max(cl.last, e.Index)
		}
	}
	cl.mu.Unlock()
	switch {
	case restored:
		cl.wakeAll(false)
	case changed:
		cl.wake(events)
	}
}

func (cl *changeLog) appendLocked(info fsm.LockView) {
	size := changeEntryBytes + len(info.Name) + len(info.Value)
	for _, h := range info.Holders {
		size += int(unsafe.Sizeof(h)) + len(h.Value)
	}
	if k := len(cl.chunks); k == 0 || len(cl.chunks[k-1]) == changeChunk {
		block := cl.spare
		if block == nil {
			block = make([]change, 0, changeChunk)
		}
		cl.spare = nil
		cl.chunks = append(cl.chunks, block)
	}
	last := &cl.chunks[len(cl.chunks)-1]
	*last = append(*last, change{info: info, size: size})
	cl.n++
	cl.bytes += size
	cl.last = max(cl.last, info.ModifyIndex)
	for cl.bytes > cl.maxBytes && cl.n > 0 {
		old := &cl.chunks[0][cl.head]
		cl.floor = max(cl.floor, old.info.ModifyIndex)
		cl.bytes -= old.size
		*old = change{} // let go of its strings
		cl.head++
		cl.n--
		if cl.head == changeChunk {
			cl.spare = cl.chunks[0][:0]
			cl.chunks[0] = nil
			cl.chunks = cl.chunks[1:]
			cl.head = 0
		}
	}
}

// changeChunk is the number of changes in one block of the log.
const changeChunk = 512

// at returns the i-th change the log holds, the oldest first.
func (cl *changeLog) at(i int) *change {
	i += cl.head
	return &cl.chunks[i/changeChunk][i%changeChunk]
}

// restoreLocked forgets every change: the state was replaced by a snapshot whose last lock
// change was at index at, so the node knows every change after it (those it applies next), and
// none before. A node that restores knows nothing between what it had and the snapshot, so its
// floor never goes below what it had observed either.
func (cl *changeLog) restoreLocked(at uint64) {
	cl.chunks, cl.head, cl.n, cl.bytes = nil, 0, 0, 0
	cl.floor = max(at, cl.last)
	cl.last = cl.floor
}

// wake closes the watches of the prefixes the changed locks fall under. It looks up each
// prefix length in use, not each watch, so a change no one watches costs a few map lookups
// however many watches wait.
func (cl *changeLog) wake(events []fsm.Event) {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	if len(cl.watches) == 0 {
		return
	}
	for i := range events {
		e := &events[i]
		if e.Kind != fsm.EventLockChanged {
			continue
		}
		for n := range cl.lengths {
			if n > len(e.Lock) {
				continue
			}
			prefix := e.Lock[:n]
			if ch, ok := cl.watches[prefix]; ok {
				close(ch)
				cl.dropLocked(prefix)
			}
		}
	}
}

// wakeAll closes every watch; closing for good makes later watches closed at once.
func (cl *changeLog) wakeAll(forGood bool) {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	cl.closed = cl.closed || forGood
	for prefix, ch := range cl.watches {
		close(ch)
		delete(cl.watches, prefix)
	}
	clear(cl.lengths)
}

func (cl *changeLog) dropLocked(prefix string) {
	delete(cl.watches, prefix)
	if cl.lengths[len(prefix)]--; cl.lengths[len(prefix)] == 0 {
		delete(cl.lengths, len(prefix))
	}
}

// watch returns a channel closed at the next change of a lock under prefix (or a restore). Take
// it before asking since, then wait on it, so that no change falls in between.
func (cl *changeLog) watch(prefix string) <-chan struct{} {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	ch, ok := cl.watches[prefix]
	if !ok {
		ch = make(chan struct{})
		if cl.closed {
			close(ch)
			return ch
		}
		cl.watches[prefix] = ch
		cl.lengths[len(prefix)]++
	}
	return ch
}

// Changes is what a node knows of the changes of the locks under a prefix after an index.
type Changes struct {
	// Locks are the changes in log order, each the lock's state right after the command that
	// changed it (ModifyIndex is that command's index); a lock that command left free reads as
	// free. Empty on a Reset.
	Locks []fsm.LockView
	// Next is the index to ask from next: every change up to it is in Locks, or was before
	// the index asked from.
	Next uint64
	// Reset says that the node no longer knows every change after the index asked from (or it
	// was 0): the caller must take the whole current state of the prefix instead, read after
	// this answer, and Next is the index that state is at least as new as.
	Reset bool
}

// since answers the changes under prefix after index after, at most limit of them unless one
// command made more (a command's changes are never split), with the index to ask from next.
func (cl *changeLog) since(prefix string, after uint64, limit int) Changes {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	if after == 0 || after < cl.floor {
		// The state read after this is at least as new as last: the state machine applies a
		// command before the observer records it.
		return Changes{Next: max(cl.last, 1), Reset: true}
	}
	i := sort.Search(cl.n, func(i int) bool { return cl.at(i).info.ModifyIndex > after })
	out := Changes{Next: max(after, cl.last)}
	for ; i < cl.n; i++ {
		info := &cl.at(i).info
		if len(out.Locks) >= limit && info.ModifyIndex != out.Locks[len(out.Locks)-1].ModifyIndex {
			out.Next = out.Locks[len(out.Locks)-1].ModifyIndex
			break
		}
		if strings.HasPrefix(info.Name, prefix) {
			out.Locks = append(out.Locks, *info)
		}
	}
	return out
}

// bounds returns the floor and the last index of the log, and the entries it holds.
func (cl *changeLog) bounds() (floor, last uint64, entries int) {
	cl.mu.RLock()
	defer cl.mu.RUnlock()
	return cl.floor, cl.last, cl.n
}

// WatchPrefix returns a channel closed at the next applied change of a lock whose name starts
// with prefix, or when the whole state is replaced by a snapshot. Take it before calling
// Changes, then wait on it, so that no change falls in between.
func (n *Node) WatchPrefix(prefix string) <-chan struct{} { return n.changes.watch(prefix) }

// Changes answers, from this node's change log, the changes of the locks under prefix after
// index after, in log order: at most limit of them, unless one command made more.
func (n *Node) Changes(prefix string, after uint64, limit int) Changes {
	return n.changes.since(prefix, after, limit)
}
