// Package embed runs a raftlock node inside a Go program, so that the replicas of a service
// elect their leader and share locks among themselves with no lock server to deploy.
//
// Each replica calls [Start] with a [Config] set in code (id, data directory, Raft address, the
// initial peers or members to join, and optionally TLS, ACL and the log store); the replicas
// form a Raft cluster over their Raft addresses, one port each. Start returns a [*Node], whose
// [Node.Client] is an ordinary [*client.Client] bound to the node in the same process: its
// requests are handed to the node's API handler in memory, without a connection or a port,
// and the node forwards to the leader what only the leader can do, as any follower does for
// its HTTP clients. Sessions, Mutex, Election and Fence behave exactly as over HTTP (local
// deadline and Done, attempts withdrawn and fenced, FIFO, lock-delay, ACL tokens), because
// they run the same client code against the same handler.
//
//	node, err := embed.Start(ctx, embed.Config{ID: "n1", DataDir: "data/n1",
//		RaftAddr: "10.0.0.1:7101", Peers: peers})
//	if err != nil { ... }
//	defer node.Close(context.Background()) // hands leadership over, snapshots
//	s, err := node.Client().NewSession(ctx)
//	if err != nil { ... }
//	defer s.Close(context.Background()) // deferred last, runs first: the session goes before the node
//	e := client.NewElection(s, "my-service/leader")
//
// # Why a package of its own, rather than package agent
//
// agent is the server process of `raftlock agent`: a config.Config of flags and files, an HTTP
// listener for the API in every case, an audit log, and a node that ends the process
// (os.Exit) when its disk fails, since a supervisor restarts it. None of that fits inside
// somebody else's program. Here the configuration is a struct of Go values, the HTTP API is
// served to others only if asked ([Config.HTTPAddr], or [Node.Handler] on the program's own
// mux), a fatal disk error stops the node and is reported on [Node.Done] with its cause
// instead of ending the program, and the node comes with a client that needs no network.
// Bending agent to do both would have put two lifecycles behind one set of options; both are
// thin assemblies of package cluster (the Raft node) and package httpapi (the API), so each
// stays small.
//
// # One port per node
//
// The members of a cluster reach each other's API to forward requests to the leader, to join
// and to check which features every member supports. An embedded node serves that API on its
// Raft port (cluster.Config.APIOnRaftPort): raft's connections begin with a binary byte,
// HTTP's with a method name, so one listener tells them apart. With TLS both pass the Raft
// port's mutual TLS with a node certificate first, so only members reach the API there;
// without TLS, whoever reaches the Raft port could already forge Raft messages. A replica
// therefore opens one port to the others, and none to anyone else unless Config.HTTPAddr asks.
//
// It imports client, cluster, httpapi, tlsutil and internal/version; nothing of the project
// imports it but its example and tests.
package embed
