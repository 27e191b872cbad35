package schemacheck

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testSchema = `{
  "type": "object", "required": ["id", "kind"], "additionalProperties": false,
  "properties": {
    "id": {"type": "string"},
    "n": {"type": ["integer", "null"]},
    "x": {"type": "number"},
    "kind": {"type": "string", "enum": ["a", "b"]},
    "v": {"const": 1},
    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}}
  },
  "allOf": [{"if": {"properties": {"kind": {"const": "b"}}}, "then": {"required": ["n"]}, "else": {"not": {"required": ["n"]}}}],
  "$defs": {"item": {"type": "object", "required": ["k"], "properties": {"k": {"type": "boolean"}}}}
}`

func TestValidate(t *testing.T) {
	s, err := Compile([]byte(testSchema))
	require.NoError(t, err)
	tests := []struct {
		doc  string
		want string // "" for valid
	}{
		{`{"id":"r","kind":"a","x":1.5,"v":1,"items":[{"k":true}]}`, ""},
		{`{"id":"r","kind":"b","n":null}`, ""},
		{`{"id":"r","kind":"b","n":3}`, ""},
		{`{"kind":"a"}`, `required field "id"`},
		{`{"id":3,"kind":"a"}`, "$.id: type integer"},
		{`{"id":"r","kind":"c"}`, "not one of"},
		{`{"id":"r","kind":"a","extra":1}`, `field "extra" is not allowed`},
		{`{"id":"r","kind":"a","n":1.5}`, "$.n: type number"},
		{`{"id":"r","kind":"a","v":2}`, "$.v: 2, want 1"},
		{`{"id":"r","kind":"a","items":[{}]}`, `$.items[0]: required field "k"`},
		{`{"id":"r","kind":"a","items":[{"k":1}]}`, "$.items[0].k: type integer"},
		{`{"id":"r","kind":"b"}`, `required field "n"`},
		{`{"id":"r","kind":"a","n":1}`, "must not"},
		{`[1]`, "type array"},
	}
	for _, tt := range tests {
		errs := s.Validate([]byte(tt.doc))
		if tt.want == "" {
			assert.Empty(t, errs, "%s: %v, want valid", tt.doc, errs)
			continue
		}
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e.Error(), tt.want)
		}
		assert.True(t, found, "%s: %v, want an error mentioning %q", tt.doc, errs, tt.want)
	}
}

func TestCompileRefusesUnsupportedKeywords(t *testing.T) {
	for _, doc := range []string{
		`{"type":"string","pattern":"^a"}`,
		`{"properties":{"a":{"minimum":1}}}`,
		`{"$defs":{"x":{"oneOf":[]}}}`,
	} {
		_, err := Compile([]byte(doc))
		assert.ErrorContains(t, err, "not supported", "%s: err = %v, want a refusal", doc, err)
	}
}
