package envserver

import (
	"encoding/json"
	"fmt"
	"maps"
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

// TestRulesInLockstep holds RULES.md, openapi.json and the conformance kit
// together: every numbered rule of RULES.md is a rule the kit checks, by
// the same name, and none besides; every rule an operation of openapi.json
// names (x-rules) exists; and the document's environment modes are those
// package envs defines.
func TestRulesInLockstep(t *testing.T) {
	headings := map[string]string{}
	for _, line := range strings.Split(string(protocoldoc.Rules()), "\n") {
		if m := ruleHeading.FindStringSubmatch(line); m != nil {
			headings[m[1]] = strings.ToLower(m[2])
		}
	}
	kit := map[string]string{}
	for _, r := range conformance.Rules() {
		kit[r.ID] = r.Name
	}
	assert.Equal(t, headings, kit, "RULES.md's numbered rules and the conformance kit's rules")
	spec, err := conformance.LoadSpec()
	require.NoError(t, err)
	for route, op := range spec.Operations {
		for _, r := range op.Rules {
			assert.Contains(t, headings, r, "%s names rule %s, which RULES.md does not have", route, r)
		}
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Spec struct {
					Properties struct {
						Mode struct {
							Enum []string `json:"enum"`
						} `json:"mode"`
					} `json:"properties"`
				} `json:"Spec"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(protocoldoc.OpenAPI(), &doc))
	modes := []string{string(envs.ModeExportRestore), string(envs.ModeRestartOnly), string(envs.ModeStateless), string(envs.ModeReplay), ""}
	for _, m := range modes {
		if m != "" {
			assert.Equal(t, envs.Mode(m), envs.EffectiveMode(envs.Mode(m)), "mode %s is one package envs knows", m)
		}
	}
	assert.ElementsMatch(t, modes, doc.Components.Schemas.Spec.Properties.Mode.Enum, "openapi.json's environment modes")
}

// ruleHeading is a numbered rule's heading in RULES.md, "## R17
// Replay-restore", its name without a trailing parenthesis ("## R3
// Request-id replay (at most once)" is the kit's "request-id replay").
var ruleHeading = regexp.MustCompile(`^## (R\d+) (.+?)(?: \(.*\))?$`)
