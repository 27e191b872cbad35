// Package schemacheck validates JSON documents against the subset of JSON
// Schema (2020-12) that turnstile's published schemas use: type (one or a
// list), required, properties, additionalProperties: false, items, enum,
// const, $ref to "#/$defs/…", allOf, not and if/then/else. Keywords outside
// the subset are refused when the schema is compiled, so a schema cannot
// quietly rely on one this package ignores. It exists because the tests
// must check the export against its schema without a third-party library.
package schemacheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// Schema is a compiled schema document.
type Schema struct {
	root map[string]any
}

// annotations are keywords that describe and never constrain.
var annotations = map[string]bool{"$schema": true, "$id": true, "$defs": true, "title": true, "description": true}

// constraints are the keywords Validate checks.
var constraints = map[string]bool{
	"type": true, "required": true, "properties": true, "additionalProperties": true, "items": true,
	"enum": true, "const": true, "$ref": true, "allOf": true, "not": true, "if": true, "then": true, "else": true,
}

// Compile parses a schema document and checks it uses only the subset.
func Compile(doc []byte) (*Schema, error) {
	var root map[string]any
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("schemacheck: parse schema: %w", err)
	}
	s := &Schema{root: root}
	if err := s.checkKeywords(root, "#"); err != nil {
		return nil, err
	}
	return s, nil
}

// checkKeywords refuses keywords outside the subset, recursively.
func (s *Schema) checkKeywords(node map[string]any, at string) error {
	for _, k := range sortedKeys(node) {
		if !annotations[k] && !constraints[k] {
			return fmt.Errorf("schemacheck: %s: keyword %q is not supported", at, k)
		}
	}
	var subs []struct {
		at   string
		node any
	}
	add := func(at string, n any) {
		subs = append(subs, struct {
			at   string
			node any
		}{at, n})
	}
	for _, k := range []string{"items", "not", "if", "then", "else"} {
		if n, ok := node[k]; ok {
			add(at+"/"+k, n)
		}
	}
	for _, k := range []string{"properties", "$defs"} {
		m, _ := node[k].(map[string]any)
		for _, name := range sortedKeys(m) {
			add(at+"/"+k+"/"+name, m[name])
		}
	}
	all, _ := node["allOf"].([]any)
	for i, n := range all {
		add(fmt.Sprintf("%s/allOf/%d", at, i), n)
	}
	for _, sub := range subs {
		m, ok := sub.node.(map[string]any)
		if !ok {
			return fmt.Errorf("schemacheck: %s: want a schema object", sub.at)
		}
		if err := s.checkKeywords(m, sub.at); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks one JSON document and returns every violation found.
func (s *Schema) Validate(doc []byte) []error {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []error{fmt.Errorf("parse document: %w", err)}
	}
	var errs []error
	s.validate(s.root, v, "$", &errs)
	return errs
}

func (s *Schema) validate(node map[string]any, v any, at string, errs *[]error) {
	fail := func(format string, args ...any) {
		*errs = append(*errs, fmt.Errorf("%s: %s", at, fmt.Sprintf(format, args...)))
	}
	if ref, ok := node["$ref"].(string); ok {
		target, err := s.resolve(ref)
		if err != nil {
			fail("%v", err)
			return
		}
		s.validate(target, v, at, errs)
	}
	if t, ok := node["type"]; ok && !typeMatches(t, v) {
		fail("type %s, want %v", typeName(v), t)
		return
	}
	if e, ok := node["enum"].([]any); ok && !containsJSON(e, v) {
		fail("%v is not one of %v", v, e)
	}
	if c, ok := node["const"]; ok && !equalJSON(c, v) {
		fail("%v, want %v", v, c)
	}
	s.validateObject(node, v, at, errs)
	if items, ok := node["items"].(map[string]any); ok {
		if arr, ok := v.([]any); ok {
			for i, it := range arr {
				s.validate(items, it, fmt.Sprintf("%s[%d]", at, i), errs)
			}
		}
	}
	s.validateLogic(node, v, at, errs)
}

// validateObject checks required, properties and additionalProperties.
func (s *Schema) validateObject(node map[string]any, v any, at string, errs *[]error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	req, _ := node["required"].([]any)
	for _, r := range req {
		if _, ok := obj[r.(string)]; !ok {
			*errs = append(*errs, fmt.Errorf("%s: required field %q is missing", at, r))
		}
	}
	props, _ := node["properties"].(map[string]any)
	for _, k := range sortedKeys(obj) {
		p, known := props[k].(map[string]any)
		if known {
			s.validate(p, obj[k], at+"."+k, errs)
		} else if ap, ok := node["additionalProperties"].(bool); ok && !ap {
			*errs = append(*errs, fmt.Errorf("%s: field %q is not allowed", at, k))
		}
	}
}

// validateLogic checks allOf, not and if/then/else.
func (s *Schema) validateLogic(node map[string]any, v any, at string, errs *[]error) {
	all, _ := node["allOf"].([]any)
	for _, sub := range all {
		s.validate(sub.(map[string]any), v, at, errs)
	}
	if not, ok := node["not"].(map[string]any); ok && s.matches(not, v) {
		*errs = append(*errs, fmt.Errorf("%s: matches a schema it must not", at))
	}
	cond, ok := node["if"].(map[string]any)
	if !ok {
		return
	}
	branch := "else"
	if s.matches(cond, v) {
		branch = "then"
	}
	if b, ok := node[branch].(map[string]any); ok {
		s.validate(b, v, at, errs)
	}
}

func (s *Schema) matches(node map[string]any, v any) bool {
	var errs []error
	s.validate(node, v, "", &errs)
	return len(errs) == 0
}

// resolve finds a "#/$defs/name" reference.
func (s *Schema) resolve(ref string) (map[string]any, error) {
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only #/$defs/… is supported", ref)
	}
	defs, _ := s.root["$defs"].(map[string]any)
	target, ok := defs[name].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", ref)
	}
	return target, nil
}

func typeMatches(t any, v any) bool {
	if list, ok := t.([]any); ok {
		for _, one := range list {
			if typeMatches(one, v) {
				return true
			}
		}
		return false
	}
	name := typeName(v)
	return name == t || (t == "number" && name == "integer")
}

// typeName is the JSON Schema type of a decoded value (numbers decoded as
// json.Number).
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case string:
		return "string"
	case json.Number:
		if _, err := x.Int64(); err == nil && !strings.ContainsAny(x.String(), ".eE") {
			return "integer"
		}
		return "number"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func containsJSON(list []any, v any) bool {
	for _, e := range list {
		if equalJSON(e, v) {
			return true
		}
	}
	return false
}

// equalJSON compares a schema value (numbers as float64) with a document
// value (numbers as json.Number).
func equalJSON(schemaValue, v any) bool {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		return err == nil && reflect.DeepEqual(schemaValue, f)
	}
	return reflect.DeepEqual(schemaValue, v)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
