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
				s, err := openLogStore(kind, b.TempDir(), 0, hclog.NewNullLogger())
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
