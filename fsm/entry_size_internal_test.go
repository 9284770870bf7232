package fsm

import (
	"testing"
	"unsafe"
)

// BenchmarkLockEntrySize reports the size of a lock entry as the allocator hands it out: the
// figure a plain mutex costs beside its name and its table slots (issue 38 keeps it within
// 10 % of what it was before a lock's grants were stored one way).
func BenchmarkLockEntrySize(b *testing.B) {
	for b.Loop() {
	}
	b.ReportMetric(float64(unsafe.Sizeof(lock{})), "entry-bytes")
}
