package workplace

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/turnstile-rl/turnstile/envs"
)

// Parameter types and formats of the tool schemas.
const (
	typeString  = "string"
	typeInteger = "integer"
	typeArray   = "array" // of strings

	formatDate  = "date"  // 2006-01-02
	formatTime  = "time"  // 15:04
	formatID    = "id"    // 8 digits
	formatEmail = "email" // contains one @
)

const (
	dateLayout     = "2006-01-02"
	clockLayout    = "15:04"
	timeLayout     = "2006-01-02T15:04"
	maxStringBytes = 4096
)

// param is one argument of a tool. The same table drives the JSON schema the
// model sees and the checks Apply makes, so the two cannot drift apart.
type param struct {
	Name     string
	Type     string
	Format   string
	Enum     []string
	Required bool
	Desc     string
}

// schema renders params as a JSON Schema object.
func schema(params []param) json.RawMessage {
	props := map[string]any{}
	required := []string{}
	for _, p := range params {
		prop := map[string]any{"type": p.Type, "description": p.Desc}
		if p.Type == typeArray {
			prop["items"] = map[string]any{"type": typeString}
		}
		if len(p.Enum) > 0 {
			prop["enum"] = p.Enum
		}
		switch p.Format {
		case formatDate:
			prop["pattern"] = `^\d{4}-\d{2}-\d{2}$`
		case formatTime:
			prop["pattern"] = `^\d{2}:\d{2}$`
		case formatID:
			prop["pattern"] = `^\d{8}$`
		}
		props[p.Name] = prop
		if p.Required {
			required = append(required, p.Name)
		}
	}
	b, err := json.Marshal(map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	})
	if err != nil {
		panic("workplace: tool schema does not encode: " + err.Error()) // constant input
	}
	return b
}

// callArgs are validated arguments: strings, int64s and []strings by name.
type callArgs map[string]any

func (a callArgs) has(name string) bool { _, ok := a[name]; return ok }

func (a callArgs) str(name string) string {
	s, _ := a[name].(string)
	return s
}

func (a callArgs) int(name string, def int64) int64 {
	if n, ok := a[name].(int64); ok {
		return n
	}
	return def
}

func (a callArgs) list(name string) []string {
	l, _ := a[name].([]string)
	return append([]string{}, l...)
}

// parseArgs checks raw against params and returns the typed values. Every
// refusal is CodeBadArguments and names the argument.
func parseArgs(tool string, params []param, raw json.RawMessage) (callArgs, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		trimmed = []byte("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil || fields == nil {
		return nil, envs.Errorf(envs.CodeBadArguments, "%s: arguments must be a JSON object", tool)
	}
	known := map[string]param{}
	names := make([]string, 0, len(params))
	for _, p := range params {
		known[p.Name] = p
		names = append(names, p.Name)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := known[k]; !ok {
			return nil, envs.Errorf(envs.CodeBadArguments, "%s: unknown argument %q (takes %s)", tool, k, strings.Join(names, ", "))
		}
	}
	out := callArgs{}
	for _, p := range params {
		v, ok := fields[p.Name]
		if !ok {
			if p.Required {
				return nil, envs.Errorf(envs.CodeBadArguments, "%s: missing required argument %q", tool, p.Name)
			}
			continue
		}
		val, err := parseValue(p, v)
		if err != nil {
			return nil, envs.Errorf(envs.CodeBadArguments, "%s: argument %q %s", tool, p.Name, err.Error())
		}
		out[p.Name] = val
	}
	return out, nil
}

type argError string

func (e argError) Error() string { return string(e) }

func parseValue(p param, raw json.RawMessage) (any, error) {
	switch p.Type {
	case typeInteger:
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return nil, argError("must be an integer")
		}
		return n, nil
	case typeArray:
		var l []string
		if err := json.Unmarshal(raw, &l); err != nil || l == nil {
			return nil, argError("must be an array of strings")
		}
		for _, s := range l {
			if err := checkString(p, s); err != nil {
				return nil, err
			}
		}
		return l, nil
	default:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return nil, argError("must be a string")
		}
		if s == "" && p.Required {
			return nil, argError("must not be empty")
		}
		if s == "" && p.Format != "" {
			return nil, argError("must not be empty")
		}
		if err := checkString(p, s); err != nil {
			return nil, err
		}
		return s, nil
	}
}

func checkString(p param, s string) error {
	if len(s) > maxStringBytes {
		return argError("is too long")
	}
	if len(p.Enum) > 0 && !contains(p.Enum, s) {
		return argError("must be one of " + strings.Join(p.Enum, ", ") + ", got " + quote(s))
	}
	if !validFormat(p.Format, s) {
		return argError("must be " + formatHint(p.Format) + ", got " + quote(s))
	}
	return nil
}

func validFormat(format, s string) bool {
	switch format {
	case formatDate:
		_, err := time.Parse(dateLayout, s)
		return err == nil
	case formatTime:
		_, err := time.Parse(clockLayout, s)
		return err == nil
	case formatID:
		_, ok := parseID(s)
		return ok
	case formatEmail:
		at := strings.Index(s, "@")
		return at > 0 && at == strings.LastIndex(s, "@") && at < len(s)-1
	}
	return true
}

func formatHint(format string) string {
	switch format {
	case formatDate:
		return "a date YYYY-MM-DD"
	case formatTime:
		return "a time HH:MM"
	case formatID:
		return "an 8-digit id"
	case formatEmail:
		return "an email address"
	}
	return "valid"
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
