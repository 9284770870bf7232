// Package python holds no Go code of its own: its test runs the Python client's test suite
// (clients/python/tests, pytest) against agent processes, so that `go test ./...` covers the
// Python client too. See python_test.go.
package python
