// Package tlsutil holds a node's TLS material and the TLS configurations built from it.
//
// A Store loads the node's certificate and key and the CA bundle from PEM files and re-reads
// them on Reload (the agent calls it on SIGHUP); a file that fails to load keeps the previous
// material. Every configuration it hands out reads the current material at each handshake, so
// a reload applies to new connections without restarting anything:
//
//   - APIServerConfig: the HTTPS API, optionally requiring client certificates of the CA; it
//     always asks for one, so that IsNode can tell another node's forwarded requests apart.
//   - PeerServerConfig and PeerClientConfig: node-to-node traffic (Raft, forwarding, join),
//     mutual TLS where each side must present a node certificate of the CA.
//
// A node certificate is one signed by the CA whose extended key usages are exactly server and
// client authentication: one without extended key usages, or with "any", which crypto/x509
// takes as allowing every usage, is not a node's. A client certificate (client authentication
// only) is accepted by the API but refused between nodes. Node-to-node connections check the CA and the certificate's usages,
// not the host name: a node is whoever holds a node certificate of the cluster's CA, whatever
// address (proxy, NAT) it was reached at. Clients of the API check host names as usual.
//
// Listener performs the TLS handshake before handing a connection on, so that a peer that fails
// it (no certificate, another CA, plain text) is dropped before its first byte is read.
//
// NewCA and CA.Issue create ECDSA P-256 certificates with the standard library only, for the
// `raftlock tls` commands and the development cluster.
//
// RefusalLog logs refused handshakes, bounded in size and rate, since anyone who reaches a port
// can cause one.
//
// It imports only the standard library, hclog and golang.org/x/time/rate.
package tlsutil
