// Package api defines the wire types of the raftlock HTTP API v1 (docs/api.md).
//
// Each type is defined once here and used by both the server (httpapi) and the Go client
// (client), so the two can never disagree about a field name. The package holds plain data and
// constants only: it imports nothing from the project and nothing outside the standard library.
package api
