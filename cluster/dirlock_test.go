package cluster_test

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/cluster"
)

// A second node on the data directory of a running one is refused with a clear error, before
// it opens anything there: two nodes would append to one Raft log. Once the first is closed,
// the directory can be used again.
func TestSecondNodeOnADataDirIsRefused(t *testing.T) {
	c := newTestCluster(t, 1, nil)
	c.waitLeader()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.config(0, ln)
	// Without the lock, New waits forever for bbolt's own lock (raft-wal's metadata or
	// raft-boltdb), taken without a timeout.
	started := make(chan error, 1)
	go func() { _, err := cluster.New(cfg); started <- err }()
	select {
	case err = <-started:
	case <-time.After(opTimeout):
		t.Fatalf("a second node on %s neither started nor failed within %s", cfg.DataDir, opTimeout)
	}
	ln.Close()
	if !errors.Is(err, cluster.ErrDataDirInUse) {
		t.Fatalf("second node on %s: %v, want ErrDataDirInUse", cfg.DataDir, err)
	}
	if !strings.Contains(err.Error(), cfg.DataDir) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("the error does not name the directory and the process holding it: %v", err)
	}
	c.kill(0)
	c.restart(0) // fails the test if the lock outlived Close
	c.waitLeader()
}
