package embed_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/client"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/embed"
	"github.com/raftlock/raftlock/jepsen/faultfs"
)

// A node whose disk fails an fsync stops at once, without ending the program, and says why on
// Done: an error matching cluster.ErrStorageFailed with the disk's own error. Its client is
// refused from then on. Needs FUSE (the jepsen harness's fault-injecting file system).
func TestAFailedFsyncStopsTheNodeAndSaysWhyOnDone(t *testing.T) {
	if err := faultfs.Available(); err != nil {
		t.Skipf("FUSE is not available here: %v", err)
	}
	dir := t.TempDir()
	disk, err := faultfs.New(filepath.Join(dir, "disk"), filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := disk.Mount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = disk.Unmount() })
	g := startGroup(t, 3, func(i int, c *embed.Config) {
		if i == 0 {
			c.DataDir = disk.MountPoint()
		}
	})
	ctx := testCtx(t)
	g.leader()
	n := g.nodes[0]
	c, err := n.NewClient(client.WithRetryTimeout(0))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	disk.FailFsync(true)
	// Writes go on through another node; the failing one fails at its next append.
	s := newSession(ctx, t, g.nodes[1].Client())
	m := client.NewMutex(s, "disk/lock")
	for i := 0; ; i++ {
		select {
		case <-n.Done():
		case <-ctx.Done():
			t.Fatal("the node with the failing disk did not stop")
		default:
			if err := m.Lock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		break
	}
	g.nodes[0] = nil
	disk.Heal()
	err = n.Err()
	if !errors.Is(err, cluster.ErrStorageFailed) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("Err of the node whose fsync failed: %v, want cluster.ErrStorageFailed with the disk's error", err)
	}
	if _, err := c.NewSession(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("its client after the stop: %v, want ErrUnavailable", err)
	}
}
