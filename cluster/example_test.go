package cluster_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	"github.com/raftlock/raftlock/cluster"
)

// A program can embed a node. This one starts a single-node cluster, opens a session, takes a
// lock and reads it back linearizably. A real cluster lists three or five members in
// InitialCluster, and each node's HTTP API (package httpapi) lets clients reach any of them.
func ExampleNode() {
	dir, err := os.MkdirTemp("", "raftlock-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}

	node, err := cluster.New(cluster.Config{
		ID:             "n1",
		DataDir:        dir,
		RaftListener:   ln,
		AdvertiseHTTP:  "127.0.0.1:7001",
		InitialCluster: map[string]string{"n1": ln.Addr().String()},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := node.WaitLeader(ctx); err != nil {
		log.Fatal(err)
	}

	session, err := node.CreateSession(ctx, "worker-7", 10*time.Second, 0)
	if err != nil {
		log.Fatal(err)
	}
	grant, err := node.Acquire(ctx, cluster.AcquireRequest{
		Session: session.ID, Lock: "jobs/nightly", Value: "host-a", SetValue: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", grant.Status)
	fmt.Println("token > 0:", grant.Token > 0)

	// A linearizable read: a read barrier, then the local state machine.
	if err := node.ReadBarrier(ctx); err != nil {
		log.Fatal(err)
	}
	lock := node.FSM().Lock("jobs/nightly")
	fmt.Println("held:", lock.Held)
	fmt.Println("by this session:", lock.Holder == session.ID, "with this token:", lock.Token == grant.Token)
	fmt.Println("value:", lock.Value)

	released, err := node.DestroySession(ctx, session.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", released)
	// Output:
	// status: ok
	// token > 0: true
	// held: true
	// by this session: true with this token: true
	// value: host-a
	// released: [jobs/nightly]
}
