package cluster

import (
	"context"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// The leader keeps every lease in one queue behind one timer: sessions expire in the order of
// their deadlines, not of their creation; a renewal moves a deadline without touching the
// queue, and a destroyed session leaves it.
func TestLeasesExpireInDeadlineOrderAndRenewalsMoveThem(t *testing.T) {
	n := newSingleNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	create := func(name string, ttl time.Duration) fsm.SessionID {
		t.Helper()
		info, err := n.CreateSession(ctx, name, ttl, 0)
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	// Created latest-deadline first: a queue in creation order would expire a first.
	a := create("a", 5*time.Second)
	c := create("c", 2*time.Second)
	b := create("b", time.Second)
	d := create("d", 1500*time.Millisecond)
	if _, err := n.DestroySession(ctx, d); err != nil {
		t.Fatal(err)
	}
	if got := n.SessionTimers(); got != 3 {
		t.Fatalf("%d leases after a destroy, want 3", got)
	}
	if l, ok := n.SessionLease(b); !ok || !l.LastRenewal.IsZero() || l.Left <= 0 || l.Left > time.Second {
		t.Fatalf("b's lease before any renewal: %+v, %v", l, ok)
	}
	names := map[fsm.SessionID]string{a: "a", b: "b", c: "c"}
	var order []string
	gone := map[fsm.SessionID]bool{}
	renewed := false
	// b is renewed until c expires, then left to expire one TTL later; sampling the state every
	// 20 ms, which is not a synchronisation: the order is what the test judges.
	for len(order) < 3 {
		if !gone[c] {
			res, err := n.RenewMany(ctx, []fsm.SessionID{b})
			if err != nil || res[0].Status != RenewOK {
				t.Fatalf("renewing b: %v %+v (expired so far: %v)", err, res, order)
			}
			renewed = true
		}
		for id, name := range names {
			if _, ok := n.fsm.Session(id); !ok && !gone[id] {
				gone[id] = true
				order = append(order, name)
			}
		}
		if renewed && !gone[b] {
			if l, ok := n.SessionLease(b); ok && l.LastRenewal.IsZero() {
				t.Fatalf("b's lease after a renewal shows none: %+v", l)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("expired so far: %v", order)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if want := []string{"c", "b", "a"}; !slices.Equal(order, want) {
		t.Fatalf("sessions expired in the order %v, want %v", order, want)
	}
	if got := n.SessionTimers(); got != 0 {
		t.Fatalf("%d leases left after every session expired", got)
	}
}

// BenchmarkLeaseMemory reports what the leader's timers hold per session lease.
func BenchmarkLeaseMemory(b *testing.B) {
	const leases = 200_000
	for range b.N {
		lt := newLeaderTimers(&Node{fsm: fsm.New(nil)})
		lt.activate(1)
		before := heapInUse()
		lt.mu.Lock()
		for i := range leases {
			var id fsm.SessionID
			id[0], id[1], id[2] = byte(i), byte(i>>8), byte(i>>16)
			lt.armSessionLocked(id, time.Hour)
		}
		lt.mu.Unlock()
		b.ReportMetric(float64(heapInUse()-before)/leases, "B/lease")
		lt.deactivate()
	}
}

// heapInUse returns the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
