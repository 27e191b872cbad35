package gateway

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCountsAreDefined: every field of the summary and the health answers
// is defined, in the OpenAPI document and in docs/trainer.md's table of
// counts, so a trainer never has to guess what a number counts.
func TestCountsAreDefined(t *testing.T) {
	var raw struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Description string `json:"description"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(OpenAPI, &raw))
	page, err := os.ReadFile("../docs/trainer.md")
	require.NoError(t, err)
	table := string(page)
	for schema, prefix := range map[string]string{"Summary": "overall.", "EnvSummary": "by_env[].", "Health": "health."} {
		for name, p := range raw.Components.Schemas[schema].Properties {
			assert.NotEqual(t, "", strings.TrimSpace(p.Description), "openapi.json: %s.%s has no description", schema, name)
			if schema == "EnvSummary" && name == "env" || schema == "Health" && (name == "state" || name == "reason" || name == "window_ms") {
				continue // not counts; described above the table
			}
			row := "`" + prefix + name + "`"
			if schema == "EnvSummary" && name != "passed" && name != "rollouts" {
				row = "`" + name + "`" // listed after by_env[].rollouts in one row
			}
			assert.Contains(t, table, row, "docs/trainer.md does not define %s%s", prefix, name)
		}
	}
}
