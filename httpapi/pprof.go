package httpapi

import (
	"net/http"
	"net/http/pprof"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/fsm"
)

// pprofRoutes serves Go's runtime profiles of this node (net/http/pprof) on g, /debug/pprof.
// Under ACL each needs operator:read, checked against this node's own state: the profile is of
// the node asked, so the request is never forwarded.
func (s *Server) pprofRoutes(g *echo.Group) {
	g.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if err := s.callerOperator(c, fsm.AccessRead); err != nil {
				return err
			}
			return next(c)
		}
	})
	wrap := func(f http.HandlerFunc) echo.HandlerFunc { return echo.WrapHandler(f) }
	g.GET("/", wrap(pprof.Index))
	g.GET("/cmdline", wrap(pprof.Cmdline))
	g.GET("/profile", wrap(pprof.Profile))
	g.GET("/symbol", wrap(pprof.Symbol))
	g.GET("/trace", wrap(pprof.Trace))
	g.GET("/:name", wrap(pprof.Index)) // heap, goroutine, allocs, block, mutex, threadcreate
}
