package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A node serves as leader only in the term whose Barrier it passed and whose timers it armed.
// One deposed and elected again before its leadership monitor ran would otherwise serve the new
// term with the old term's timers, before the new term's Barrier.
func TestLeaderServesOnlyInItsReadyTerm(t *testing.T) {
	n := newSingleNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	term := n.raft.CurrentTerm()
	if !n.IsLeader() || n.readyTerm.Load() != term {
		t.Fatalf("ready term %d, raft term %d: want a ready leader of the raft term", n.readyTerm.Load(), term)
	}
	n.readyTerm.Store(term - 1) // as if the monitor had not yet seen this term begin
	if n.IsLeader() {
		t.Fatal("IsLeader with the ready term behind raft's")
	}
	if _, err := n.CreateSession(ctx, "s", time.Minute, 0); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("CreateSession outside the ready term = %v, want ErrNotLeader", err)
	}
	if err := n.ReadBarrier(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("ReadBarrier outside the ready term = %v, want ErrNotLeader", err)
	}
	n.readyTerm.Store(term)
	if !n.IsLeader() {
		t.Fatal("not leader again in the ready term")
	}
}

// An expiry or a lock-delay end armed in an earlier term proposes nothing: the leader of a term
// in between may have renewed the session, and this node's new term has its own timers.
func TestTimerCallbacksOfAnEarlierTermProposeNothing(t *testing.T) {
	n := newSingleNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := n.CreateSession(ctx, "s", time.Minute, 0)
	if err != nil {
		t.Fatal(err)
	}
	term := n.raft.CurrentTerm()
	before := n.raft.LastIndex()
	n.expireSession(info.ID, term-1)
	n.endDelay(delayKey{name: "l"}, time.Now().UnixNano(), term-1)
	n.serveQueue("l", term-1)
	if _, ok := n.fsm.Session(info.ID); !ok {
		t.Fatal("an expiry armed in an earlier term expired the session")
	}
	if last := n.raft.LastIndex(); last != before {
		t.Fatalf("callbacks of an earlier term proposed entries %d..%d", before+1, last)
	}
	// The current term's expiry goes through.
	n.expireSession(info.ID, term)
	if _, ok := n.fsm.Session(info.ID); ok {
		t.Fatal("the current term's expiry did not expire the session")
	}
}
