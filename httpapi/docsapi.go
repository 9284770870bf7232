package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/raftlock/raftlock/docs"
	"github.com/raftlock/raftlock/ui"
)

// openAPI serves the OpenAPI document of this node's version (GET /v1/openapi.yaml), which
// needs no token: it says what the API is, nothing of what the cluster holds.
func (s *Server) openAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", docs.OpenAPI())
}

// uiRoutes serves the web console: /ui/ is its page, /ui/{asset} its script and style sheet,
// all with the console's security headers. They need no token; the page reads the API with
// the one entered in it.
func (s *Server) uiRoutes(e *echo.Echo) {
	e.GET("/ui/*", func(c echo.Context) error {
		a, ok := ui.Lookup(c.Param("*"))
		if !ok {
			return echo.ErrNotFound
		}
		h := c.Response().Header()
		for k, v := range ui.Headers() {
			h.Set(k, v)
		}
		return c.Blob(http.StatusOK, a.ContentType, a.Body)
	})
}
