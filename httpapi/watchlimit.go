package httpapi

import (
	"net/http"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/api"
)

// blockingLimiter counts the blocking queries (a lock's GET with ?index, a prefix watch) each
// client has waiting on this node, where it was received: by token under ACL (its accessor id,
// as this node resolved it), otherwise, or for a token this node does not know, by the
// client's IP address, as the rate limiter counts. Each waits in a goroutine with its buffers
// for up to its wait, on this node and, forwarded, on the leader: the bound keeps one client
// from making the leader hold thousands of them.
type blockingLimiter struct {
	mu sync.Mutex
	n  map[string]int
}

// limitBlocking admits a blocking query within Limits.MaxBlockingPerToken or
// MaxBlockingPerAddress, or refuses it with 429 too_many_requests and Retry-After, before a
// follower forwards it; its place is freed once it is answered. A query forwarded by another
// node was counted there, where it was received, and is not counted again.
func (s *Server) limitBlocking(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !blockingQuery(c.Request()) {
			return next(c)
		}
		release, err := s.admitBlocking(c)
		if err != nil {
			return err
		}
		defer release()
		return next(c)
	}
}

// blockingQuery says whether the request is a blocking query: a read of a lock, or a prefix
// watch, with ?index; or a streamed watch.
func blockingQuery(req *http.Request) bool {
	if streamedWatch(req) {
		return true // however many prefixes it has
	}
	if req.Method != http.MethodGet && req.Method != http.MethodHead || !req.URL.Query().Has("index") {
		return false
	}
	p := req.URL.Path
	return p == "/v1/locks" || strings.HasPrefix(p, "/v1/locks/") && !strings.HasSuffix(p, "/check")
}

// admitBlocking counts a blocking query against its client's bound; release uncounts it.
func (s *Server) admitBlocking(c echo.Context) (release func(), err error) {
	req := c.Request()
	if req.Header.Get(api.HeaderForwarded) != "" {
		return func() {}, nil
	}
	key, max, who := "ip:"+remoteHost(req), s.cfg.Limits.MaxBlockingPerAddress, "this client address"
	if a := accessorOf(c); a != "" {
		key, max, who = "token:"+a, s.cfg.Limits.MaxBlockingPerToken, "this token"
	}
	if max <= 0 {
		return func() {}, nil
	}
	l := &s.blocking
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[key] >= max {
		s.metrics.refuse(limitWatches)
		return nil, tooMany("%s has %d blocking queries (watches) waiting on this node, the configured maximum; one must end first", who, max)
	}
	if l.n == nil {
		l.n = make(map[string]int)
	}
	l.n[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.n[key]--; l.n[key] <= 0 {
				delete(l.n, key)
			}
		})
	}, nil
}
