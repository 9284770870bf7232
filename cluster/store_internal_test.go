package cluster

import (
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// BenchmarkLogStoreAppend measures one synced append of a batch of commands to each log store,
// the step a leader and a follower each take, in sequence, before a command commits.
func BenchmarkLogStoreAppend(b *testing.B) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		for _, batch := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/batch=%d", kind, batch), func(b *testing.B) {
				s, err := openLogStore(kind, b.TempDir(), 0, false, nil, hclog.NewNullLogger())
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				data := make([]byte, 40) // about an acquire command
				next := uint64(1)
				logs := make([]*raft.Log, batch)
				b.ResetTimer()
				for range b.N {
					for j := range logs {
						logs[j] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}
						next++
					}
					if err := s.StoreLogs(logs); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkLogStoreGet measures reading one entry back, as raft does for every entry after the
// snapshot when it starts (looking for configuration changes) and again when it applies them.
func BenchmarkLogStoreGet(b *testing.B) {
	for _, kind := range []string{LogStoreBoltDB, LogStoreWAL} {
		b.Run(kind, func(b *testing.B) {
			s, err := openLogStore(kind, b.TempDir(), 0, false, nil, hclog.NewNullLogger())
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const n = 4096
			data := make([]byte, 40) // about an acquire command
			logs := make([]*raft.Log, n)
			for i := range logs {
				logs[i] = &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: data}
			}
			if err := s.StoreLogs(logs); err != nil {
				b.Fatal(err)
			}
			var l raft.Log
			b.ResetTimer()
			for i := range b.N {
				if err := s.GetLog(uint64(i%n+1), &l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
