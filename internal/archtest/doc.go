// Package archtest holds no code, only tests of the repository's shape: that the packages
// import one another in the directions their docs state (cmd → httpapi → cluster → fsm, the
// client and the harness never reaching a server package, and the leaf packages — api, fsm,
// config, tlsutil, internal/version, internal/testkit, jepsen/history, jepsen/proxy,
// jepsen/faultfs — importing nothing of the project), and that every package with tests runs
// them through testkit.Main, which fails the run on a leaked goroutine.
package archtest
