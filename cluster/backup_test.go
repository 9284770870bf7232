package cluster_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// saveBackup writes a backup of n's state into memory.
func saveBackup(t *testing.T, n *cluster.Node) []byte {
	t.Helper()
	if err := n.ReadBarrier(opContext(t)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := n.WriteBackup(opContext(t), &buf); err != nil {
		t.Fatalf("backup of %s: %v", n.ID(), err)
	}
	return buf.Bytes()
}

// restore restores file at the current leader of c with gap.
func restore(t *testing.T, c *testCluster, file []byte, gap uint64) cluster.RestoreResult {
	t.Helper()
	_, leader := c.waitLeader()
	res, err := leader.RestoreBackup(opContext(t), bytes.NewReader(file), cluster.RestoreOptions{IndexGap: gap})
	if err != nil {
		t.Fatalf("restore at %s: %v", leader.ID(), err)
	}
	return res
}

// withHeader rewrites a backup file's header by fn, with a valid checksum: what a file
// written by a broken or older tool could hold.
func withHeader(t *testing.T, file []byte, fn func(*backup.Header)) []byte {
	t.Helper()
	rd, err := backup.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	h := rd.Header()
	fn(&h)
	var out bytes.Buffer
	if _, err := backup.Write(&out, h, rd.Body()); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// A backup restored into a new cluster, whose log is much shorter than the one the backup
// came from, brings back its locks (held back by a lock-delay: the restore ends every
// session), and the next token is greater than every token in it,
// even with no gap and a header that understates where the backup was taken: the restored
// state's index is at least the highest index the state holds.
func TestRestoreIntoANewClusterKeepsTokensGrowing(t *testing.T) {
	src := newTestCluster(t, 1, nil)
	_, old := src.waitLeader()
	s := createSession(t, old, "holder", longTTL, 0)
	var top uint64
	for range 60 { // a log longer than the new cluster's
		tok := mustAcquire(t, old, s, "churn", "")
		mustRelease(t, old, s, "churn", tok)
		top = max(top, tok)
	}
	held := mustAcquire(t, old, s, "jobs/held", "v1")
	file := saveBackup(t, old)

	dst := newTestCluster(t, 3, nil)
	_, leader := dst.waitLeader()
	dst.waitPublished(leader)
	if last := leader.Raft().LastIndex(); last >= held {
		t.Fatalf("the new cluster's log (%d) is not shorter than the backup's tokens (%d): the test proves nothing", last, held)
	}
	lying := withHeader(t, file, func(h *backup.Header) { h.Index = 1 })
	res := restore(t, dst, lying, 0)
	if res.Index <= held {
		t.Fatalf("restored at index %d, not above the backup's token %d", res.Index, held)
	}
	_, leader = dst.waitLeader()
	if l := leader.FSM().Lock("jobs/held"); l.Held || l.DelayUntil == 0 || l.ModifyIndex <= held {
		t.Fatalf("restored lock %+v, want under a lock-delay, not held, changed after %d", l, held)
	}
	other := createSession(t, leader, "next", longTTL, 0)
	next := mustAcquire(t, leader, other, "churn", "")
	if next <= held || next <= top {
		t.Fatalf("first token after the restore %d, not above the backup's %d", next, held)
	}
	dst.waitConverged()
}

// The default gap moves the log well past the backup, and past the cluster's own log when a
// cluster restores a backup older than its state: tokens issued before the restore, by
// either, stay below every token issued after.
func TestRestoreMovesPastTheClustersOwnTokens(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	_, leader := c.waitLeader()
	s := createSession(t, leader, "a", longTTL, 0)
	old := saveBackup(t, leader)
	var last uint64
	for range 20 {
		tok := mustAcquire(t, leader, s, "x", "")
		mustRelease(t, leader, s, "x", tok)
		last = tok
	}
	res := restore(t, c, old, 1000)
	if res.Index < last+1000 {
		t.Fatalf("restored at %d, want at least the last token %d plus the gap", res.Index, last)
	}
	_, leader = c.waitLeader()
	s = createSession(t, leader, "b", longTTL, 0) // the restore ended the sessions
	if tok := mustAcquire(t, leader, s, "x", ""); tok <= res.Index {
		t.Fatalf("token after the restore %d, not above the restored index %d", tok, res.Index)
	}
}

// A restore answers once the node takes proposals again: a write its caller sends next is
// never refused as "a restore is being installed" (CI met that: the restore's goroutine sent
// raft's answer before it let proposals in).
func TestRestoreAnswersWithProposalsOpen(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	_, leader := c.waitLeader()
	createSession(t, leader, "a", longTTL, 0)
	file := saveBackup(t, leader)
	for i := range 100 {
		restore(t, c, file, 0)
		if !leader.ProposalsOpen() {
			t.Fatalf("restore %d answered while proposals were still held back", i+1)
		}
	}
}

// A restore ends every session of the backup (their clients cannot be told what it changed),
// and holds each lock they held back for a full TTL from the restore, from the restore and
// not from when the backup was taken (the leader's timers are re-armed), and a lock-delay in
// the backup runs again in full before the lock is free.
func TestRestoreEndsSessionsAndHoldsTheirLocksBackAFullTTL(t *testing.T) {
	const ttl, delay = 3 * time.Second, 3 * time.Second
	src := newTestCluster(t, 1, nil)
	_, old := src.waitLeader()
	s := createSession(t, old, "short", ttl, 0)
	mustAcquire(t, old, s, "kept", "")
	d := createSession(t, old, "delayed", 2*time.Second, delay)
	mustAcquire(t, old, d, "delayed", "")
	waitSessionGone(t, old, d, 10*time.Second) // its lock is now under a lock-delay
	if old.FSM().Lock("delayed").DelayUntil == 0 {
		t.Fatal("no lock-delay after the expiry")
	}
	file := saveBackup(t, old)
	src.kill(0)

	dst := newTestCluster(t, 3, nil)
	_, leader := dst.waitLeader()
	dst.waitPublished(leader)
	restore(t, dst, file, 0)
	restored := time.Now()
	_, leader = dst.waitLeader()
	if _, ok := leader.FSM().Session(s); ok {
		t.Fatal("the backup's session survived the restore")
	}
	if l := leader.FSM().Lock("kept"); l.Held || l.DelayUntil == 0 {
		t.Fatalf("the ended session's lock %+v, want not held, under a lock-delay", l)
	}
	// Free at the earliest a full TTL (or delay) after the restore (a check at 80 %: the
	// machine may be slow, never fast).
	for _, lock := range []string{"kept", "delayed"} {
		testkit.Eventually(t, 3*delay, "the lock-delay of "+lock+" to end", func() bool {
			return leader.FSM().Lock(lock).DelayUntil == 0
		})
		if took := time.Since(restored); took < delay*8/10 {
			t.Fatalf("the lock-delay of %s ended %v after the restore, before %v", lock, took, delay)
		}
	}
}

// A restore never turns a feature off: the cluster's enabled features stay enabled when the
// backup was taken by a cluster that had none.
func TestRestoreKeepsTheClustersFeatures(t *testing.T) {
	src := newTestCluster(t, 1, func(cfg *cluster.Config) { cfg.Features = []fsm.Feature{} })
	_, old := src.waitLeader()
	createSession(t, old, "a", longTTL, 0)
	file := saveBackup(t, old)
	if sum, err := backup.Inspect(bytes.NewReader(file)); err != nil || len(sum.State.Features) != 0 {
		t.Fatalf("backup of a cluster without features: %+v, %v", sum.State, err)
	}
	dst := newTestCluster(t, 3, nil)
	_, leader := dst.waitLeader()
	dst.waitPublished(leader)
	before := leader.FSM().Features()
	if len(before) == 0 {
		t.Fatal("the new cluster enabled no feature: the test proves nothing")
	}
	restore(t, dst, file, 0)
	snap := dst.waitConverged()
	for _, i := range dst.running() {
		if got := dst.node(i).FSM().Features(); !slices.Equal(got, before) {
			t.Fatalf("%s has features %v after the restore, had %v", dst.ids[i], got, before)
		}
	}
	if len(snap) == 0 {
		t.Fatal("no state")
	}
}

// A damaged file, or one whose snapshot does not read, changes nothing.
func TestRestoreOfABadFileChangesNothing(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	_, leader := c.waitLeader()
	c.waitPublished(leader) // no entry of the leader's own may move the log during the test
	s := createSession(t, leader, "a", longTTL, 0)
	tok := mustAcquire(t, leader, s, "x", "")
	file := saveBackup(t, leader)
	flipped := slices.Clone(file)
	flipped[len(flipped)/2] ^= 1
	for name, bad := range map[string][]byte{
		"flipped byte": flipped,
		"truncated":    file[:len(file)-10],
		"not a backup": []byte("hello\n"),
	} {
		before := leader.Raft().LastIndex()
		_, err := leader.RestoreBackup(opContext(t), bytes.NewReader(bad), cluster.RestoreOptions{})
		if !errors.Is(err, cluster.ErrInvalidBackup) {
			t.Fatalf("%s: %v, want ErrInvalidBackup", name, err)
		}
		if after := leader.Raft().LastIndex(); after != before {
			t.Fatalf("%s: the log moved from %d to %d", name, before, after)
		}
	}
	if l := leader.FSM().Lock("x"); !l.Held || l.Token != tok {
		t.Fatalf("lock after refused restores: %+v", l)
	}
}

// A restore that would move the log index to within 2^62 of the top of uint64 (where raft could
// soon commit nothing more, and tokens would wrap) is refused, whether the backup's index or
// the gap takes it there, and nothing changes: the cluster goes on issuing tokens.
func TestRestoreRefusesIndexesNearTheTopOfUint64(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	_, leader := c.waitLeader()
	c.waitPublished(leader) // no entry of the leader's own may move the log during the test
	s := createSession(t, leader, "a", longTTL, 0)
	tok := mustAcquire(t, leader, s, "x", "")
	file := saveBackup(t, leader)
	for name, tc := range map[string]struct {
		index, gap uint64
	}{
		"top minus 3, no gap":                   {math.MaxUint64 - 3, 0},
		"top minus the default gap minus 3":     {math.MaxUint64 - cluster.DefaultIndexGap - 3, cluster.DefaultIndexGap},
		"just past the headroom":                {math.MaxUint64 - cluster.IndexHeadroom + 1, 0},
		"a gap that takes it past the headroom": {1000, math.MaxUint64 - cluster.IndexHeadroom},
	} {
		near := withHeader(t, file, func(h *backup.Header) { h.Index = tc.index })
		before := leader.Raft().LastIndex()
		_, err := leader.RestoreBackup(opContext(t), bytes.NewReader(near), cluster.RestoreOptions{IndexGap: tc.gap})
		if !errors.Is(err, cluster.ErrNoIndexHeadroom) || !errors.Is(err, cluster.ErrInvalidBackup) {
			t.Fatalf("%s: %v, want ErrNoIndexHeadroom", name, err)
		}
		if after := leader.Raft().LastIndex(); after != before {
			t.Fatalf("%s: the log moved from %d to %d", name, before, after)
		}
		if l := leader.FSM().Lock("x"); !l.Held || l.Token != tok {
			t.Fatalf("%s: lock after the refused restore: %+v", name, l)
		}
	}
	if next := mustAcquire(t, leader, s, "y", ""); next <= tok {
		t.Fatalf("token after the refused restores %d, not above %d", next, tok)
	}
	// At the headroom exactly, it is done.
	edge := withHeader(t, file, func(h *backup.Header) { h.Index = math.MaxUint64 - cluster.IndexHeadroom })
	if res := restore(t, c, edge, 0); res.Index < math.MaxUint64-cluster.IndexHeadroom {
		t.Fatalf("restored at %d", res.Index)
	}
}
