package cluster

import (
	"sync"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func TestLastWaitToLeaveRemovesTheQueueEntry(t *testing.T) {
	nt := newNotifier()
	var s fsm.SessionID
	s[0] = 1
	first, second := nt.waitGrant("l", s), nt.waitGrant("l", s)
	if first.ready != nil || second.ready != nil {
		t.Fatal("a wait registered with no removal in flight must not wait to propose")
	}
	if nt.leave(first) != nil {
		t.Fatal("the first of two waits to leave was told to remove the queue entry")
	}
	removed := nt.leave(second)
	if removed == nil {
		t.Fatal("the last wait to leave was not told to remove the queue entry")
	}
	other := nt.waitGrant("l2", s) // another lock: not held back
	if other.ready != nil {
		t.Fatal("a removal held back a wait for another lock")
	}
	third := nt.waitGrant("l", s)
	if third.ready == nil {
		t.Fatal("a wait registered during the removal may propose before the removal applies")
	}
	select {
	case <-third.ready:
		t.Fatal("ready before the removal ended")
	default:
	}
	removed()
	select {
	case <-third.ready:
	default:
		t.Fatal("not ready after the removal ended")
	}
	if fourth := nt.waitGrant("l", s); fourth.ready != nil {
		t.Fatal("a finished removal still holds back new waits")
	}
	removed() // a second call is harmless
}

func TestWaitsLeavingTogetherRemoveTheEntryOnce(t *testing.T) {
	nt := newNotifier()
	var s fsm.SessionID
	s[0] = 1
	for round := range 2000 {
		ws := []*grantWait{nt.waitGrant("l", s), nt.waitGrant("l", s), nt.waitGrant("l", s)}
		removers := make(chan func(), len(ws))
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(func() { removers <- nt.leave(w) })
		}
		wg.Wait()
		close(removers)
		n := 0
		for r := range removers {
			if r != nil {
				n++
				r()
			}
		}
		if n != 1 {
			t.Fatalf("round %d: %d of 3 waits leaving together were told to remove the entry", round, n)
		}
	}
}
