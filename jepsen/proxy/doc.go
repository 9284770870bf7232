// Package proxy cuts and heals the network between raftlock nodes without root or packet filters.
//
// Each node dials each peer's Raft address through its own Proxy (the agent's hidden
// --raft-peer-addrs flag points node i at the proxy for i→j), so a Mesh holds one TCP proxy per
// ordered pair of nodes. Cutting i→j closes that pair's connections and black-holes or refuses
// new ones; healing lets traffic through again. Partitions are sets of cut pairs.
//
// An HTTPProxy stands between one Go client and one node: it has the same modes, and it sees
// each request whole (terminating TLS if told to), so that a RequestFault can hold a request
// back or deliver it at once with its answer lost and again later on a new connection.
//
// The package imports only the standard library.
package proxy
