// Package protocoldoc holds the participant protocol's published contract,
// embedded so that binaries (bin/conformance) and tests read the very
// document that is published: openapi.json (both planes) and RULES.md (the
// numbered rules a schema cannot say).
package protocoldoc

import (
	_ "embed"
	"slices"
)

//go:embed openapi.json
var openAPI []byte

//go:embed RULES.md
var rules []byte

// OpenAPI returns a copy of docs/protocol/openapi.json.
func OpenAPI() []byte { return slices.Clone(openAPI) }

// Rules returns a copy of docs/protocol/RULES.md.
func Rules() []byte { return slices.Clone(rules) }
