package agent

import "net/http"

// Transport returns an http.RoundTripper that reaches this agent's API in memory, without a
// connection (httpapi.Server.Transport): for a client in the same process, such as the tests'
// in-process clients of a dev cluster. It refuses requests once the agent stops.
func (a *Agent) Transport() http.RoundTripper { return a.http.Transport() }
