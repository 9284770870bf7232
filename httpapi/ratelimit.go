package httpapi

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"

	"github.com/raftlock/raftlock/api"
)

// rateLimit limits the write requests each client sends to this node to perSecond, with a
// burst of twice that: by token under ACL (its accessor id, as this node resolved it), and
// otherwise, or for a token this node does not know, by the client's IP address as the
// connection shows it. A request over
// the limit is answered 429 too_many_requests with Retry-After before anything is applied.
// Requests forwarded by another node were limited there and pass.
func (s *Server) rateLimit(perSecond float64) echo.MiddlewareFunc {
	burst := max(1, int(math.Ceil(2*perSecond)))
	retry := strconv.Itoa(max(1, int(math.Ceil(1/perSecond))))
	return middleware.RateLimiterWithConfig(middleware.RateLimiterConfig{
		Skipper: func(c echo.Context) bool {
			req := c.Request()
			return req.Method == http.MethodGet || req.Method == http.MethodHead || req.Method == http.MethodOptions ||
				req.Header.Get(api.HeaderForwarded) != ""
		},
		Store: middleware.NewRateLimiterMemoryStoreWithConfig(middleware.RateLimiterMemoryStoreConfig{
			Rate: rate.Limit(perSecond), Burst: burst, ExpiresIn: 3 * time.Minute,
		}),
		IdentifierExtractor: func(c echo.Context) (string, error) {
			if a := accessorOf(c); a != "" {
				return "token:" + a, nil
			}
			return "ip:" + remoteHost(c.Request()), nil
		},
		DenyHandler: func(c echo.Context, _ string, _ error) error {
			s.metrics.refuse(limitRate)
			who := "this client"
			if accessorOf(c) != "" {
				who = "this token"
			}
			e := tooMany("%s sent more than %g write requests per second (burst %d); nothing was applied", who, perSecond, burst)
			e.retryAfter = retry
			return e
		},
	})
}
