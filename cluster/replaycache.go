package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// replayCacheEntries bounds the entries a replayCache keeps: a few tens of MB of commands.
const replayCacheEntries = 1 << 17

// replayCache keeps the log entries raft reads while it starts until raft reads them again:
// NewRaft reads every entry after the snapshot, looking for configuration changes, and applies
// the same entries once it learns they are committed. With a store that pays a transaction and
// a decode per read (raft-boltdb), that second pass costs as much as the first.
//
// It fills only between startFilling and stopFilling (around NewRaft), gives each entry out
// once, and forgets an entry before any write or deletion that could change it: a read that
// raced with such a change is not kept.
type replayCache struct {
	raft.LogStore

	mu      sync.Mutex
	filling bool
	gen     uint64 // advanced by every write and deletion
	entries map[uint64]*raft.Log
}

var _ raft.MonotonicLogStore = (*replayCache)(nil)

func newReplayCache(store raft.LogStore) *replayCache {
	return &replayCache{LogStore: store, entries: make(map[uint64]*raft.Log)}
}

// startFilling makes the cache keep what is read from the store.
func (c *replayCache) startFilling() {
	c.mu.Lock()
	c.filling = true
	c.mu.Unlock()
}

// stopFilling ends filling; entries already kept stay until they are read or invalidated.
func (c *replayCache) stopFilling() {
	c.mu.Lock()
	c.filling = false
	c.mu.Unlock()
}

// GetLog gives out a kept entry once, else reads the store (keeping the entry while filling).
func (c *replayCache) GetLog(index uint64, out *raft.Log) error {
	c.mu.Lock()
	if l, ok := c.entries[index]; ok {
		delete(c.entries, index)
		c.mu.Unlock()
		*out = *l
		return nil
	}
	keep, gen := c.filling && len(c.entries) < replayCacheEntries, c.gen
	c.mu.Unlock()
	if err := c.LogStore.GetLog(index, out); err != nil {
		return err
	}
	if keep {
		l := *out
		c.mu.Lock()
		if c.gen == gen {
			c.entries[index] = &l
		}
		c.mu.Unlock()
	}
	return nil
}

// StoreLog writes one entry, as StoreLogs.
func (c *replayCache) StoreLog(l *raft.Log) error {
	return c.StoreLogs([]*raft.Log{l})
}

// StoreLogs forgets the entries it is about to overwrite, then writes.
func (c *replayCache) StoreLogs(logs []*raft.Log) error {
	c.mu.Lock()
	c.gen++
	for _, l := range logs {
		delete(c.entries, l.Index)
	}
	c.mu.Unlock()
	return c.LogStore.StoreLogs(logs)
}

// DeleteRange forgets every kept entry, then deletes.
func (c *replayCache) DeleteRange(min, max uint64) error {
	c.mu.Lock()
	c.gen++
	clear(c.entries)
	c.mu.Unlock()
	return c.LogStore.DeleteRange(min, max)
}

// IsMonotonic reports what the wrapped store reports: raft treats a monotonic store (raft-wal)
// differently after it installs a snapshot.
func (c *replayCache) IsMonotonic() bool {
	m, ok := c.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}
