package workload

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/jepsen/proxy"
)

// netCut is a client worker's own network to the nodes: one HTTP proxy per node, which can
// black-hole its traffic for a while, and on which a proxy.RequestFault can delay and duplicate
// its requests.
type netCut struct {
	scheme  string
	proxies []*proxy.HTTPProxy
	mu      sync.Mutex
	until   time.Time
	timer   *time.Timer
}

// newNetCut starts a proxy per endpoint. serverTLS (with targetTLS) makes the proxies serve
// HTTPS with a certificate the client trusts and speak HTTPS to the nodes.
func newNetCut(endpoints []Endpoint, scheme string, serverTLS, targetTLS *tls.Config) (*netCut, error) {
	n := &netCut{scheme: scheme}
	for _, ep := range endpoints {
		p, err := proxy.ListenHTTP(ep.Addr, serverTLS, targetTLS)
		if err != nil {
			n.Close()
			return nil, fmt.Errorf("workload: %w", err)
		}
		n.proxies = append(n.proxies, p)
	}
	return n, nil
}

// Endpoints are the URLs to give the client.
func (n *netCut) Endpoints() []string {
	var out []string
	for _, p := range n.proxies {
		out = append(out, n.scheme+"://"+p.Addr())
	}
	return out
}

// setFault installs f (nil: none) on every proxy.
func (n *netCut) setFault(f *proxy.RequestFault) {
	for _, p := range n.proxies {
		p.SetFault(f)
	}
}

// cut black-holes the worker's traffic for d (or longer, if a cut already in force lasts longer).
func (n *netCut) cut(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	until := time.Now().Add(d)
	if until.Before(n.until) {
		return
	}
	n.until = until
	for _, p := range n.proxies {
		p.SetMode(proxy.Blackhole)
	}
	if n.timer != nil {
		n.timer.Stop()
	}
	n.timer = time.AfterFunc(d, n.heal)
}

func (n *netCut) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if time.Now().Before(n.until) {
		return
	}
	for _, p := range n.proxies {
		p.SetMode(proxy.Pass)
	}
}

// Close stops the proxies.
func (n *netCut) Close() {
	n.mu.Lock()
	if n.timer != nil {
		n.timer.Stop()
	}
	n.mu.Unlock()
	for _, p := range n.proxies {
		p.Close()
	}
}

// IsAcquire reports whether r asks for a lock (POST /v1/locks/{name}/acquire): the requests of a
// Mutex's or an Election's attempts, which the delay-dup fault delays and duplicates. Renewals
// and releases are left alone, so that sessions live and holds end on time, and a late request
// is always one that the server must refuse once its attempt ended.
func IsAcquire(r *http.Request) bool {
	return r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/v1/locks/") &&
		strings.HasSuffix(r.URL.Path, "/acquire")
}
