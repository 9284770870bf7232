package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/jepsen/faultfs"
)

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// agentBinary builds raftlock once for the tests of this package.
func agentBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "raftlock-jepsen-cluster-test-")
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		binary, buildErr = Build(ctx, dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// newestSnapshot returns the index of the newest snapshot in the node's data dir, or 0.
func newestSnapshot(n *Node) uint64 {
	entries, _ := os.ReadDir(filepath.Join(n.DataDir, "snapshots"))
	var best uint64
	for _, e := range entries {
		parts := strings.Split(e.Name(), "-")
		if len(parts) != 3 || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if idx, err := strconv.ParseUint(parts[1], 10, 64); err == nil && idx > best {
			best = idx
		}
	}
	return best
}

// TestPowerCutKeepsAcknowledgedState grants locks on a one-node cluster whose data dir is on
// faultfs, waits for a snapshot and the compaction of the log behind it, grants more, cuts the
// power and checks that every grant is still held under its token after the restart. Before
// the data dir and each snapshot's directory were fsynced, the cut took the whole log (the
// node bootstrapped a new cluster), or left the newest snapshot empty with the log behind it
// gone.
func TestPowerCutKeepsAcknowledgedState(t *testing.T) {
	if err := faultfs.Available(); err != nil {
		t.Skipf("FUSE is not available here (%v): power cuts cannot be tested", err)
	}
	for _, store := range []string{"wal", "boltdb"} {
		t.Run(store, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c, err := Start(ctx, Options{Binary: agentBinary(t), Dir: t.TempDir(), Nodes: 1, FaultFS: true,
				ExtraArgs: []string{"--log-store", store, "--snapshot-threshold", "8", "--trailing-logs", "4", "--snapshot-interval", "100ms"}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			n := c.Nodes[0]
			s, _, err := c.CreateSession(ctx, n, "test", "10m")
			if err != nil {
				t.Fatal(err)
			}
			tokens := map[string]uint64{}
			grant := func(i int) {
				lock := fmt.Sprintf("l%d", i)
				tok, _, err := c.Acquire(ctx, n, lock, s.ID)
				if err != nil {
					t.Fatal(err)
				}
				tokens[lock] = tok
			}
			for i := 0; i < 20; i++ {
				grant(i)
			}
			// A snapshot taken while the grants were going on may leave fewer entries behind it
			// than the threshold, and then no other comes: grant more until one covers l19.
			next := 20
			if err := poll(ctx, func() error {
				if newestSnapshot(n) < tokens["l19"] {
					grant(next)
					next++
					return errors.New("no snapshot of the grants yet")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i := next; i < next+5; i++ {
				grant(i)
			}
			rep, err := n.PowerCut(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("power cut: %s", rep)
			if err := n.Start(); err != nil {
				t.Fatal(err)
			}
			if err := c.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			for lock, tok := range tokens {
				l, err := c.ReadLock(ctx, n, lock)
				if err != nil {
					t.Fatal(err)
				}
				if !l.Held || l.Session != s.ID || l.Token != tok {
					t.Errorf("after the power cut %s is %+v, want held by %s under token %d", lock, l, s.ID[:8], tok)
				}
			}
		})
	}
}

// TestPowerCutKeepsTheAuditLog: audit lines synced before a power cut are still in the file
// after it. Before the agent fsynced the directory of a new audit log, the cut took the whole
// file: its directory entry was never durable.
func TestPowerCutKeepsTheAuditLog(t *testing.T) {
	if err := faultfs.Available(); err != nil {
		t.Skipf("FUSE is not available here (%v): power cuts cannot be tested", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	audit := filepath.Join(dir, "n1", "data", "audit.log")
	c, err := Start(ctx, Options{Binary: agentBinary(t), Dir: dir, Nodes: 1, FaultFS: true, ExtraArgs: []string{"--audit-log", audit}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	n := c.Nodes[0]
	if _, _, err := c.CreateSession(ctx, n, "audited", "10s"); err != nil {
		t.Fatal(err)
	}
	// The agent syncs its audit log once a second: wait until the line is written and no file
	// of the node has unsynced writes.
	if err := poll(ctx, func() error {
		b, _ := os.ReadFile(audit)
		if files, _ := n.Disk.Unsynced(); !strings.Contains(string(b), "/v1/sessions") || files > 0 {
			return errors.New("the audit line is not synced yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.PowerCut(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(audit)
	if err != nil || !strings.Contains(string(b), "/v1/sessions") {
		t.Fatalf("after the power cut the audit log holds %q (%v), want the synced line of the session's creation", b, err)
	}
}

// TestPowerCutKeepsTheDevManagementToken: `raftlock dev --secure` bootstraps the ACLs once and
// keeps the management token in DATA/management-token; the bootstrap is durable, so the file
// must be too, or a power cut leaves a cluster nobody can administer. Before the file and its
// directory were fsynced, the cut took it.
func TestPowerCutKeepsTheDevManagementToken(t *testing.T) {
	if err := faultfs.Available(); err != nil {
		t.Skipf("FUSE is not available here (%v): power cuts cannot be tested", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	disk, err := faultfs.New(filepath.Join(dir, "disk"), filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := disk.Mount(); err != nil {
		t.Fatal(err)
	}
	defer disk.Unmount()
	n := &Node{ID: "dev", LogPath: filepath.Join(dir, "dev.log"), binary: agentBinary(t), state: Stopped,
		args: []string{"dev", "--secure", "--data-dir", disk.MountPoint(), "--base-port", "0"}}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	defer n.Kill(context.Background())
	// The banner (on the log) is printed once the token file is written.
	if err := poll(ctx, func() error {
		if log, _ := n.LogSince(0); !strings.Contains(log, "RAFTLOCK_TOKEN") {
			return errors.New("the dev cluster is not up yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(disk.MountPoint(), "management-token")
	want, err := os.ReadFile(token)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := disk.PowerCut(); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(token); err != nil || string(got) != string(want) {
		t.Fatalf("after the power cut the management token file holds %q (%v), want %q", got, err, want)
	}
}
