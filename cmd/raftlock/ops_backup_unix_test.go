//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/api"
	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/internal/testkit"
)

// loadResult is what a load's workers saw: the highest token granted to any of them.
type loadResult struct {
	mu      sync.Mutex
	top     uint64
	grants  int
	lastErr error
}

func (r *loadResult) granted(tok uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.top, r.grants = max(r.top, tok), r.grants+1
}

// runLoad starts workers that take and give back two shared locks through the Go client,
// each with its own session, until stop closes; wait returns once they have all ended.
func runLoad(t *testing.T, cl *client.Client, workers int, prefix string) (stop func(), res *loadResult) {
	t.Helper()
	res = &loadResult{}
	stop = sessionWorkers(cl, workers, 15*time.Second, nil, func(ctx context.Context, w int, s *client.Session) {
		m := client.NewMutex(s, fmt.Sprintf("%s/%d", prefix, w%2))
		for ctx.Err() == nil {
			if err := m.Lock(ctx); err != nil {
				res.mu.Lock()
				res.lastErr = err
				res.mu.Unlock()
				continue
			}
			res.granted(m.Token())
			_ = m.Unlock(context.Background())
		}
	})
	return stop, res
}

// lockTableOf reads the lock table a backup file holds, as a node would restore it.
func lockTableOf(t *testing.T, path string) []fsm.LockInfo {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := backup.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	m := fsm.New(nil)
	if err := m.Restore(nopCloser{rd.Body()}); err != nil {
		t.Fatal(err)
	}
	return m.Locks("")
}

type nopCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (n nopCloser) Read(p []byte) (int, error) { return n.r.Read(p) }
func (nopCloser) Close() error                 { return nil }

// sameTable fails the test unless the API's lock table is the one the backup holds.
func sameTable(t *testing.T, got []api.Lock, want []fsm.LockInfo) {
	t.Helper()
	var g, w []string
	for _, l := range got {
		g = append(g, fmt.Sprintf("%s held=%t session=%s token=%d value=%q waiters=%d", l.Name, l.Held, l.Session, l.Token, l.Value, l.Waiters))
	}
	for _, l := range want {
		session := ""
		if l.Held {
			session = l.Holder.String()
		}
		w = append(w, fmt.Sprintf("%s held=%t session=%s token=%d value=%q waiters=%d", l.Name, l.Held, session, l.Token, l.Value, l.Waiters))
	}
	if strings.Join(g, "\n") != strings.Join(w, "\n") {
		t.Fatalf("lock table after the restore:\n%s\nthe backup's:\n%s", strings.Join(g, "\n"), strings.Join(w, "\n"))
	}
}

// A backup saved with `raftlock snapshot save` from a three-node cluster of agent processes
// under load (workers taking and giving back locks through the Go client, and holders that
// keep theirs), restored with `raftlock snapshot restore` into a new cluster: the new
// cluster's lock table is the backup's, each lock held by nobody (a restore ends every
// session), and the next token is greater than any the old cluster issued, before the backup
// or after it.
func TestSnapshotOfALoadedClusterRestoresIntoANewOne(t *testing.T) {
	c := newProcCluster(t, "a1", "a2", "a3", "b1", "b2", "b3")
	for _, id := range []string{"a1", "a2", "a3"} {
		c.start(id, "--initial-cluster", c.initial("a1", "a2", "a3"))
	}
	for _, id := range []string{"b1", "b2", "b3"} {
		c.start(id, "--initial-cluster", c.initial("b1", "b2", "b3"))
	}
	oldIDs, newIDs := []string{"a1", "a2", "a3"}, []string{"b1", "b2", "b3"}
	c.waitCluster("a1", oldIDs...)
	old := c.client(oldIDs...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	holder, err := old.NewSession(ctx, client.WithTTL(time.Minute), client.WithSessionName("holder"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := client.NewMutex(holder, fmt.Sprintf("held/%d", i), client.WithValue(fmt.Sprintf("v%d", i))).Lock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stop, load := runLoad(t, old, 4, "load")
	testkit.Eventually(t, 30*time.Second, "the load to get going", func() bool { load.mu.Lock(); defer load.mu.Unlock(); return load.grants >= 20 })

	file := filepath.Join(t.TempDir(), "backup.snap")
	out := c.mustCLI(oldIDs, "snapshot", "save", file)
	testkit.Eventually(t, 30*time.Second, "more grants after the save", func() bool { load.mu.Lock(); defer load.mu.Unlock(); return load.grants >= 60 })
	stop()
	if !strings.Contains(out, "saved "+file) {
		t.Fatalf("snapshot save said %q", out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the saved file: %v, %v", fi, err)
	}
	inspect := c.mustCLI(nil, "snapshot", "inspect", file)
	for _, want := range []string{"checksum ok:          true", "sessions:", "locks:"} {
		if !strings.Contains(inspect, want) {
			t.Fatalf("snapshot inspect does not say %q:\n%s", want, inspect)
		}
	}
	want := lockTableOf(t, file)
	var inBackup uint64
	for _, l := range want {
		inBackup = max(inBackup, l.Token)
	}
	if len(want) < 5 {
		t.Fatalf("the backup holds %d locks, want the 5 held ones at least", len(want))
	}

	c.waitCluster("b1", newIDs...)
	restored := c.mustCLI(newIDs, "snapshot", "restore", file)
	if !strings.Contains(restored, "restored "+file) {
		t.Fatalf("snapshot restore said %q", restored)
	}
	fresh := c.client(newIDs...)
	// The restore ends every session: nothing is held, and what was held is held back.
	sameTable(t, lockTable(t, fresh), nil)
	other, err := fresh.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.NewMutex(other, "held/0").TryLock(ctx); !errors.Is(err, client.ErrLockDelayed) {
		t.Fatalf("TryLock of a lock held in the backup, right after the restore: %v, want delayed", err)
	}

	s, err := fresh.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := client.NewMutex(s, "after/restore")
	if err := m.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	load.mu.Lock()
	top := load.top
	load.mu.Unlock()
	if m.Token() <= top || m.Token() <= inBackup {
		t.Fatalf("first token after the restore %d, not above the old cluster's %d (backup's highest %d)", m.Token(), top, inBackup)
	}
	// The holder's session is not in the new cluster: its client cannot be told what the
	// restore changed.
	if _, err := fresh.Raw().GetSession(ctx, holder.ID()); !errors.Is(err, client.ErrSessionNotFound) {
		t.Fatalf("the holder's session after the restore: %v, want not found", err)
	}
	// A damaged file is refused before it reaches the cluster.
	data, _ := os.ReadFile(file)
	data[len(data)/2] ^= 1
	bad := filepath.Join(t.TempDir(), "bad.snap")
	if err := os.WriteFile(bad, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := c.cli(nil, "snapshot", "inspect", bad); r.code != 1 || !strings.Contains(r.stderr, "checksum") {
		t.Fatalf("inspect of a damaged file: exit %d, %s", r.code, r.stderr)
	}
	if r := c.cli(newIDs, "snapshot", "restore", bad); r.code != 1 || !bytes.Contains([]byte(r.stderr), []byte("nothing was changed")) {
		t.Fatalf("restore of a damaged file: exit %d, %s", r.code, r.stderr)
	}
	if load.lastErr != nil && !errors.Is(load.lastErr, context.Canceled) {
		t.Logf("the load's last error (retried): %v", load.lastErr)
	}
	c.checkLogs()
}
