//go:build linux

package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/bench"
	jcluster "github.com/raftlock/raftlock/jepsen/cluster"
)

// TestStateWorkload runs the large-state workload of `raftlock bench --workload state` at a
// small scale (the measurement of docs/capacity.md builds a million sessions and locks): three
// agent processes get 10,000 sessions, 10,000 held locks and 1,000 waiters, a Raft snapshot
// and a backup are taken under lock traffic, a fresh node catches up by snapshot, the
// cluster starts again from disk and the backup is restored. It checks that the state was
// built whole and each step happened, not how fast.
func TestStateWorkload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := jcluster.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	const sessions, waiters = 10_000, 1_000
	rep, err := bench.RunState(ctx, bench.StateOptions{Binary: bin, Dir: dir, Sessions: sessions, Waiters: waiters,
		// A snapshot soon under the probe's traffic, and a log short enough that the fresh
		// node is sent one.
		AgentFlags: []string{"--snapshot-threshold", "1024", "--trailing-logs", "1024", "--snapshot-interval", "1s"}})
	if rep != nil {
		var table strings.Builder
		_ = rep.WriteTable(&table)
		t.Log("\n" + table.String())
	}
	if err != nil {
		t.Fatalf("RunState: %v", err)
	}
	if rep.ServerSessions < sessions || rep.ServerLocks < sessions || rep.ServerWaiters != waiters {
		t.Errorf("the leader counts %.0f sessions, %.0f held locks and %.0f waiters; want at least %d, %d and exactly %d",
			rep.ServerSessions, rep.ServerLocks, rep.ServerWaiters, sessions, sessions, waiters)
	}
	if rep.RaftSnapshots < 1 || rep.RaftSnapshotBytes <= 0 || rep.ProbeOpsInSnapshot < 1 {
		t.Errorf("no Raft snapshot measured under lock traffic: %d snapshots, %.0f bytes, %d probe operations during it",
			rep.RaftSnapshots, rep.RaftSnapshotBytes, rep.ProbeOpsInSnapshot)
	}
	if rep.BackupBytes <= 0 || rep.ProbeOpsInBackup < 1 {
		t.Errorf("no backup measured under lock traffic: %d bytes, %d probe operations during it", rep.BackupBytes, rep.ProbeOpsInBackup)
	}
	if rep.ProbeErrors != 0 {
		t.Errorf("the probe's lock traffic failed %d times: %v", rep.ProbeErrors, rep.ProbeErrorSample)
	}
	if rep.CatchUpSeconds <= 0 || rep.CatchUpSnapshots < 1 {
		t.Errorf("the fresh node did not catch up by snapshot: %.1fs, %.0f snapshots", rep.CatchUpSeconds, rep.CatchUpSnapshots)
	}
	if rep.StartSeconds <= 0 || rep.StartPeakRSS <= 0 {
		t.Errorf("no start from disk measured: %.1fs, peak %.0f bytes", rep.StartSeconds, rep.StartPeakRSS)
	}
	if rep.RestoredLocks < sessions || rep.RestoreSeconds <= 0 || rep.RestorePeakRSSAbs <= 0 {
		t.Errorf("restore: %d locks in %.1fs, peak %.0f bytes; want at least %d locks", rep.RestoredLocks, rep.RestoreSeconds,
			rep.RestorePeakRSSAbs, sessions)
	}
	for _, pe := range []bench.StatePerEntryOf{rep.PerEntryLeader, rep.PerEntryFollower} {
		if pe.Session.Heap <= 0 || pe.Lock.Heap <= 0 {
			t.Errorf("no memory per session or lock measured: %+v", pe)
		}
	}
}
