// Package archtest holds no code, only a test that the packages import one another in the
// directions the package docs and DESIGN state: cmd → httpapi → cluster → fsm, the client and
// the harness never reaching a server package, and the leaf packages (api, fsm, config,
// tlsutil, internal/version, jepsen/history, jepsen/proxy, jepsen/faultfs) importing nothing
// of the project.
package archtest
