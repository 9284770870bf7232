// Package docs is raftlock's user documentation. Its only Go is the OpenAPI document of the
// HTTP API, embedded so that every node serves the one its source tree holds. It imports
// nothing of the project.
package docs

import (
	_ "embed"
	"slices"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API (docs/openapi.yaml).
func OpenAPI() []byte { return slices.Clone(openAPI) }
