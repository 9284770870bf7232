// Package ui is raftlock's web console: one page, a script and a style sheet, embedded in the
// binary and served by every node under /ui/ (httpapi). It has no build step and loads
// nothing from elsewhere: the page reads the node's own HTTP API, with the token entered in it
// kept in memory only, and shows every value as text, never as markup.
//
// It imports nothing of the project.
package ui

import (
	"embed"
	"path"
	"strings"
)

//go:embed static
var static embed.FS

// Asset is one file of the console.
type Asset struct {
	Body        []byte
	ContentType string
}

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Lookup returns the file at name, the path after /ui/ ("" is the page), and whether there is
// one.
func Lookup(name string) (Asset, bool) {
	if name == "" {
		name = "index.html"
	}
	ct, ok := contentTypes[path.Ext(name)]
	if !ok || strings.Contains(name, "/") {
		return Asset{}, false
	}
	body, err := static.ReadFile("static/" + name)
	if err != nil {
		return Asset{}, false
	}
	return Asset{Body: body, ContentType: ct}, true
}

// ContentSecurityPolicy lets the page run only its own script and style sheet and talk only
// to the node that served it: an injected tag can neither run nor send anything elsewhere.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Headers returns the headers of every answer under /ui/: the policy above, no sniffing, no
// framing, no referrer, and no caching (the page's version is the node's).
func Headers() map[string]string {
	return map[string]string{
		"Content-Security-Policy": ContentSecurityPolicy,
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-cache",
	}
}
