package envserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	protocoldoc "github.com/turnstile-rl/turnstile/docs/protocol"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/conformance"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestOpenAPIMatchesServer fails on drift between the server and
// docs/protocol/openapi.json: the routes the server registers, the status of
// every error code, the environment codes, and what every operation must
// list (its plane's token scheme, 401 unauthorized, a control route's 404
// control_disabled, a mutation's 503 parked and attempt fence codes). The
// answers the server actually gives are checked against the document by the
// conformance run (protocol/conformance, TestGoEnvServerConforms).
func TestOpenAPIMatchesServer(t *testing.T) {
	spec, err := conformance.LoadSpec()
	require.NoError(t, err)
	srv, _ := newInternal(t)
	got, want := slices.Sorted(slices.Values(srv.Routes())), spec.Routes()
	assert.True(t, slices.Equal(got, want), "routes: the server registers %v\nthe document has %v", got, want)
	assert.True(t, maps.Equal(codeStatus, spec.Codes), "error codes: the server maps %v\nthe document says %v", codeStatus, spec.Codes)
	envCodes := []string{envs.CodeUnknownTool, envs.CodeBadArguments, envs.CodeIllegalAction, envs.CodeBadTask,
		envs.CodeBadState, envs.CodeNotExportable, envs.CodeEpisodeOver}
	assert.True(t, slices.Equal(spec.EnvCodes, envCodes), "environment codes: the document lists %v, envs has %v", spec.EnvCodes, envCodes)
	for route, op := range spec.Operations {
		assert.Empty(t, checkOperation(route, op), "%s drifts from the document", route)
	}
}

// checkOperation lists what a documented operation lacks for its plane.
func checkOperation(route string, op conformance.Operation) []string {
	var errs []string
	want := func(status int, code string) {
		if !slices.Contains(op.Errors[status], code) {
			errs = append(errs, fmt.Sprintf("does not list %s at %d", code, status))
		}
	}
	_, path, _ := strings.Cut(route, " ")
	switch {
	case route == protocol.RouteHealth:
		if op.Security != "" || len(op.Errors) != 0 {
			errs = append(errs, "the health probe takes no token and answers no error")
		}
	case strings.HasPrefix(path, protocol.ControlPrefix):
		if op.Security != "controlToken" {
			errs = append(errs, "a control route must want the controlToken scheme, not "+op.Security)
		}
		want(401, protocol.CodeUnauthorized)
		want(404, protocol.CodeControlDisabled)
	default:
		if op.Security != "dataToken" {
			errs = append(errs, "a data route must want the dataToken scheme, not "+op.Security)
		}
		want(401, protocol.CodeUnauthorized)
		if strings.HasPrefix(route, "POST ") {
			want(503, protocol.CodeParked)
			want(409, protocol.CodeStaleAttempt)
			want(409, protocol.CodeAttemptNotInstalled)
			want(400, protocol.CodeMalformed)
		}
	}
	if len(op.Rules) == 0 && route != protocol.RouteHealth {
		errs = append(errs, "names no rule (x-rules)")
	}
	return errs
}

// ruleHeading is a rule's heading in RULES.md: "## R3 Request-id replay
// (at most once)".
var ruleHeading = regexp.MustCompile(`(?m)^## (R[0-9]+) (.+)$`)

// documentedRule is one of RULES.md's numbered rules: its id, title and
// text.
type documentedRule struct{ id, title, text string }

// documentedRules are RULES.md's numbered rules, in order.
func documentedRules(t *testing.T) []documentedRule {
	t.Helper()
	doc := string(protocoldoc.Rules())
	locs := ruleHeading.FindAllStringSubmatchIndex(doc, -1)
	require.NotEmpty(t, locs, "RULES.md has no numbered rules")
	var out []documentedRule
	for i, l := range locs {
		end := len(doc)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		if next := strings.Index(doc[l[1]:end], "\n## "); next >= 0 {
			end = l[1] + next
		}
		out = append(out, documentedRule{id: doc[l[2]:l[3]], title: doc[l[4]:l[5]], text: doc[l[1]:end]})
	}
	return out
}

// TestRulesMatchOpenAPIAndKit keeps RULES.md, openapi.json and the
// conformance kit in lockstep: the rules are R1…Rn in order; every rule an
// operation names (x-rules) exists and every rule is named by an
// operation; the kit checks exactly these rules, under their titles; every
// error code of the document is explained in RULES.md; the capabilities'
// component, schema version and features (x-features, which a coordinator
// needs) are protocol's, each feature explained in R17; and the
// document's environment modes are those package envs defines.
func TestRulesMatchOpenAPIAndKit(t *testing.T) {
	rules := documentedRules(t)
	titles := map[string]string{}
	for i, r := range rules {
		require.Equal(t, fmt.Sprintf("R%d", i+1), r.id, "RULES.md rule %d is numbered %s", i+1, r.id)
		titles[r.id] = r.title
	}
	spec, err := conformance.LoadSpec()
	require.NoError(t, err)
	named := map[string]bool{}
	for route, op := range spec.Operations {
		for _, id := range op.Rules {
			assert.Contains(t, titles, id, "%s names rule %s, which RULES.md does not have", route, id)
			named[id] = true
		}
	}
	for _, r := range rules {
		assert.True(t, named[r.id], "no operation of openapi.json names %s %s in x-rules", r.id, r.title)
	}

	kit := conformance.Rules()
	require.Len(t, kit, len(rules), "the kit checks %d rules, RULES.md has %d", len(kit), len(rules))
	for i, k := range kit {
		title := strings.ToLower(rules[i].title)
		if j := strings.Index(title, " ("); j >= 0 {
			title = title[:j]
		}
		assert.Equal(t, rules[i].id, k.ID, "kit rule %d", i)
		assert.Equal(t, title, k.Name, "kit rule %s is named otherwise than RULES.md", k.ID)
	}

	doc := string(protocoldoc.Rules())
	for code := range spec.Codes {
		assert.Contains(t, doc, "`"+code+"`", "RULES.md does not explain error code %s", code)
	}

	var raw struct {
		Components struct {
			Schemas struct {
				Spec struct {
					Properties struct {
						Mode struct {
							Enum []string `json:"enum"`
						} `json:"mode"`
					} `json:"properties"`
				} `json:"Spec"`
				Capabilities struct {
					Properties struct {
						Component     struct{ Enum []string } `json:"component"`
						SchemaVersion struct{ Enum []int }    `json:"schema_version"`
					} `json:"properties"`
					Features map[string]struct {
						Required bool     `json:"required"`
						Rules    []string `json:"rules"`
					} `json:"x-features"`
				} `json:"Capabilities"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(protocoldoc.OpenAPI(), &raw))
	caps := raw.Components.Schemas.Capabilities
	assert.Equal(t, []string{protocol.ComponentEnvironmentServer}, caps.Properties.Component.Enum)
	assert.Equal(t, []int{protocol.ControlSchemaVersion}, caps.Properties.SchemaVersion.Enum)
	assert.ElementsMatch(t, protocol.Features(), slices.Collect(maps.Keys(caps.Features)), "x-features against protocol.Features()")
	r17 := rules[16].text
	for name, f := range caps.Features {
		assert.Equal(t, slices.Contains(protocol.RequiredFeatures(), name), f.Required, "x-features %s: required", name)
		assert.Contains(t, r17, "`"+name+"`", "R17 does not explain feature %s", name)
		for _, id := range f.Rules {
			assert.Contains(t, titles, id, "x-features %s names rule %s", name, id)
		}
	}

	modes := []string{string(envs.ModeExportRestore), string(envs.ModeRestartOnly), string(envs.ModeStateless), string(envs.ModeReplay), ""}
	for _, m := range modes {
		if m != "" {
			assert.Equal(t, envs.Mode(m), envs.EffectiveMode(envs.Mode(m)), "mode %s is one package envs knows", m)
		}
	}
	assert.ElementsMatch(t, modes, raw.Components.Schemas.Spec.Properties.Mode.Enum, "openapi.json's environment modes")
}

// TestOpenAPISpecMatchesEnvs fails on drift between what GET /v1/envs
// answers (envs.Spec, envs.TaskFormat, envs.Tool) and the schemas
// docs/protocol/openapi.json documents for it: the same JSON fields.
func TestOpenAPISpecMatchesEnvs(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(protocoldoc.OpenAPI(), &doc))
	for name, v := range map[string]any{"Spec": envs.Spec{}, "TaskFormat": envs.TaskFormat{}, "Tool": envs.Tool{}} {
		schema, ok := doc.Components.Schemas[name]
		require.True(t, ok, "openapi.json has no schema %s", name)
		got := slices.Sorted(maps.Keys(schema.Properties))
		assert.Equal(t, jsonFields(reflect.TypeOf(v)), got, "openapi.json schema %s drifts from envs.%s", name, name)
	}
}

// jsonFields lists the JSON names of a struct's fields, sorted.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
