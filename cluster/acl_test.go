package cluster_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
)

// ACL commands go through the log: every node resolves the same tokens with the same rights,
// a deleted token resolves nowhere once every node applied the delete, and no secret reaches
// any node's data directory.
func TestACLStateIsReplicatedAndKeepsNoSecret(t *testing.T) {
	t.Parallel()
	c := newTestCluster(t, 3, nil)
	_, leader := c.waitLeader()

	root, err := leader.ACLBootstrap(opContext(t))
	if err != nil {
		t.Fatal(err)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if !uuid.MatchString(root.AccessorID) || !uuid.MatchString(root.SecretID) || root.AccessorID == root.SecretID ||
		!reflect.DeepEqual(root.Policies, []string{fsm.ManagementPolicy}) || root.CreateIndex == 0 {
		t.Fatalf("bootstrap token %+v", root)
	}
	if _, err := leader.ACLBootstrap(opContext(t)); !errors.Is(err, cluster.ErrACLBootstrapped) {
		t.Fatalf("second bootstrap: %v", err)
	}
	p, err := leader.SetACLPolicy(opContext(t), fsm.Policy{Name: "jobs", Locks: []fsm.LockRule{{Prefix: "jobs/", Access: fsm.AccessWrite}}}, true)
	if err != nil || p.CreateIndex == 0 || p.ModifyIndex != p.CreateIndex {
		t.Fatalf("policy %+v, %v", p, err)
	}
	if _, err := leader.SetACLPolicy(opContext(t), fsm.Policy{Name: "jobs"}, true); !errors.Is(err, cluster.ErrPolicyExists) {
		t.Fatalf("create of an existing policy: %v", err)
	}
	if _, err := leader.SetACLPolicy(opContext(t), fsm.Policy{Name: fsm.ManagementPolicy}, false); !errors.Is(err, cluster.ErrBuiltinPolicy) {
		t.Fatalf("change of management: %v", err)
	}
	if _, err := leader.CreateACLToken(opContext(t), "x", []string{"nope"}); !errors.Is(err, cluster.ErrPolicyNotFound) {
		t.Fatalf("token with an unknown policy: %v", err)
	}
	jobs, err := leader.CreateACLToken(opContext(t), "jobs worker", []string{"jobs"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := leader.CreateOwnedSession(opContext(t), jobs.AccessorID, "w", longTTL, 0)
	if err != nil || s.Owner != jobs.AccessorID {
		t.Fatalf("owned session %+v, %v", s, err)
	}
	snap := c.waitConverged()
	for _, i := range c.running() {
		n := c.node(i)
		tok, authz, ok := n.ResolveToken(jobs.SecretID)
		if !ok || tok.AccessorID != jobs.AccessorID || authz.Lock("jobs/a") != fsm.AccessWrite || authz.Lock("db/a") != fsm.AccessDeny {
			t.Fatalf("node %s resolves the jobs token as %+v %v", n.ID(), tok, ok)
		}
		if _, authz, _ := n.ResolveToken(root.SecretID); !authz.Management() {
			t.Fatalf("node %s: the bootstrap token is not management", n.ID())
		}
		if info, _ := n.FSM().Session(s.ID); info.Owner != jobs.AccessorID {
			t.Fatalf("node %s: session owner %q", n.ID(), info.Owner)
		}
	}

	if err := leader.DeleteACLToken(opContext(t), jobs.AccessorID); err != nil {
		t.Fatal(err)
	}
	if err := leader.DeleteACLToken(opContext(t), jobs.AccessorID); !errors.Is(err, cluster.ErrTokenNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if err := leader.DeleteACLToken(opContext(t), root.AccessorID); !errors.Is(err, cluster.ErrLastManagementToken) {
		t.Fatalf("delete of the last management token: %v", err)
	}
	if err := leader.DeleteACLPolicy(opContext(t), "nope"); !errors.Is(err, cluster.ErrPolicyNotFound) {
		t.Fatalf("delete of an unknown policy: %v", err)
	}
	if _, _, ok := leader.ResolveToken(jobs.SecretID); ok {
		t.Fatal("the leader resolves a token whose delete it acknowledged")
	}
	c.waitConverged()
	for _, i := range c.running() {
		if _, _, ok := c.node(i).ResolveToken(jobs.SecretID); ok {
			t.Fatalf("node %d still resolves a deleted token", i)
		}
	}
	if !bytes.Contains(snap, jobs.SecretHash[:]) {
		t.Fatal("the state does not hold the secret's hash")
	}

	// Every file of every data directory, log and snapshots alike, without the secrets.
	for _, i := range c.running() {
		if err := c.node(i).Raft().Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatalf("snapshot: %v", err)
		}
	}
	c.closeAll()
	for _, dir := range c.dirs {
		accessorSeen := false // the files searched do hold the tokens
		walkFiles(t, dir, func(path string, b []byte) {
			accessorSeen = accessorSeen || bytes.Contains(b, []byte(jobs.AccessorID))
			for _, secret := range []string{root.SecretID, jobs.SecretID} {
				if bytes.Contains(b, []byte(secret)) {
					t.Errorf("%s holds a secret", path)
				}
			}
		})
		if !accessorSeen {
			t.Errorf("no file of %s holds the token's accessor id", dir)
		}
	}
}

// walkFiles calls fn with the path and content of every file under dir.
func walkFiles(t *testing.T, dir string, fn func(path string, b []byte)) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		fn(path, b)
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("reading %s: %v (%d files)", dir, err, n)
	}
}
