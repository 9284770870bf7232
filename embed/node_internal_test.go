package embed

import (
	"errors"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/cluster"
)

// The hook cluster calls when a write to the Raft log fails stops the node at once and
// reports the cause on Done; the program goes on. A disk made to fail for real (the harness's
// FUSE file system) cannot be tested in this process: the node mmaps its bbolt file, and a
// page fault on a FUSE file served by the faulting process itself deadlocks it at the next
// stop-the-world of the garbage collector (it hung a run for 18 minutes). cluster's tests
// check that a failed write reaches the hook; jepsen's disk-eio nemesis, the agent's exit.
func TestStorageFailureHookStopsTheNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := Start(t.Context(), Config{ID: "n1", DataDir: filepath.Join(t.TempDir(), "n1"), RaftListener: ln,
		Peers: map[string]string{"n1": ln.Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(t.Context())
	n.storageFailed(syscall.EIO) // as cluster's fail-stop store calls it, on Raft's write path
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close after the storage failure")
	}
	if err := n.Err(); !errors.Is(err, cluster.ErrStorageFailed) || !errors.Is(err, syscall.EIO) {
		t.Fatalf("Err: %v, want cluster.ErrStorageFailed and the cause", err)
	}
	if st := n.Cluster().Raft().State(); st != raft.Shutdown {
		t.Fatalf("raft is %v after the storage failure", st)
	}
}
