// Package httpapi serves raftlock's HTTP API v1 (docs/api.md) with echo/v4.
//
// It validates every request at the edge (names, sizes, durations, unknown JSON fields) and maps
// every failure to the one error body of the API in a single place (errors.go). Writes and
// linearizable reads that reach a follower are forwarded to the leader, long polls included,
// and answered as if the leader had been called: writes over the node's peer channel once the
// cluster enabled it (channel.go), everything else over HTTP. It also serves /v1/health,
// /v1/ready, /metrics, the OpenAPI document at /v1/openapi.yaml (from docs) and the web
// console under /ui/ (from ui). With Config.TLS the API is HTTPS only (a plain-HTTP request gets no
// answer at all), and with Config.ForwardTLS forwarding uses HTTPS too.
//
// It reaches the cluster node through the Node interface defined here (see its doc for why it
// exists with one implementation), and imports cluster for that node's request and result
// types, backup for snapshot headers, fsm for the state's read types, api for the wire types,
// tlsutil for its listener, and docs and ui for the embedded files they serve.
package httpapi
