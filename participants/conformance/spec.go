package conformance

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	protocoldoc "github.com/turnstile-rl/turnstile/docs/protocol"
)

// Spec is what the conformance kit and the drift test read from the
// OpenAPI document: the operations, the status each error code is sent
// with, and, per operation, the statuses and codes it may answer.
type Spec struct {
	// Codes maps every protocol error code to its HTTP status
	// (components.x-error-codes).
	Codes map[string]int
	// EnvCodes are the built-in environment refusal codes (422).
	EnvCodes []string
	// Operations are keyed by Route ("GET /v1/stats", "POST
	// /v1/sessions/{rollout_id}/operate"): the spelling of the protocol
	// package's Route* constants.
	Operations map[string]Operation
}

// Operation is one documented method and path.
type Operation struct {
	ID string
	// Security is the bearer scheme the operation wants: "dataToken",
	// "controlToken" or "" (none).
	Security string
	// Errors maps each documented error status to the codes it lists.
	Errors map[int][]string
	// Rules are the numbered rules the operation is bound by (x-rules).
	Rules []string
}

// LoadSpec parses the embedded docs/protocol/openapi.json.
func LoadSpec() (*Spec, error) { return ParseSpec(protocoldoc.OpenAPI()) }

type rawSpec struct {
	OpenAPI    string                             `json:"openapi"`
	Paths      map[string]map[string]rawOperation `json:"paths"`
	Components struct {
		Codes    map[string]int `json:"x-error-codes"`
		EnvCodes []string       `json:"x-environment-codes"`
	} `json:"components"`
}

type rawOperation struct {
	OperationID string                `json:"operationId"`
	Security    []map[string][]string `json:"security"`
	Rules       []string              `json:"x-rules"`
	Responses   map[string]struct {
		Codes []string `json:"x-error-codes"`
	} `json:"responses"`
}

// ParseSpec reads an OpenAPI document in the shape docs/protocol uses.
func ParseSpec(doc []byte) (*Spec, error) {
	var raw rawSpec
	if err := json.Unmarshal(doc, &raw); err != nil {
		return nil, fmt.Errorf("parse OpenAPI document: %w", err)
	}
	if !strings.HasPrefix(raw.OpenAPI, "3.") {
		return nil, fmt.Errorf("OpenAPI version %q, want 3.x", raw.OpenAPI)
	}
	s := &Spec{Codes: raw.Components.Codes, EnvCodes: raw.Components.EnvCodes, Operations: map[string]Operation{}}
	for path, methods := range raw.Paths {
		for method, ro := range methods {
			op, err := ro.operation(s.Codes)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			s.Operations[strings.ToUpper(method)+" "+path] = op
		}
	}
	return s, nil
}

func (ro rawOperation) operation(codes map[string]int) (Operation, error) {
	op := Operation{ID: ro.OperationID, Errors: map[int][]string{}, Rules: ro.Rules}
	for _, sec := range ro.Security {
		for name := range sec {
			op.Security = name
		}
	}
	for st, resp := range ro.Responses {
		status, err := strconv.Atoi(st)
		if err != nil {
			return Operation{}, fmt.Errorf("response %q is not a status", st)
		}
		if status < 400 {
			continue
		}
		for _, c := range resp.Codes {
			if want, ok := codes[c]; ok && want != status {
				return Operation{}, fmt.Errorf("code %s is listed under %d, x-error-codes says %d", c, status, want)
			}
		}
		op.Errors[status] = resp.Codes
	}
	return op, nil
}

// Check says whether the answer status/code to route is documented: a 2xx
// needs no code; an error's code must be listed for the operation at that
// status (an environment's own code at 422 always is).
func (s *Spec) Check(route string, status int, code string) error {
	op, ok := s.Operations[route]
	if !ok {
		return fmt.Errorf("%s is not in the document", route)
	}
	if status < 400 {
		return nil
	}
	if status == http.StatusUnprocessableEntity && !slices.Contains(s.codeList(), code) {
		return nil // an environment's own refusal code
	}
	if !slices.Contains(op.Errors[status], code) {
		return fmt.Errorf("%s answered %d %s; the document lists %v at %d", route, status, code, op.Errors[status], status)
	}
	return nil
}

func (s *Spec) codeList() []string {
	out := make([]string, 0, len(s.Codes))
	for c := range s.Codes {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// Routes returns the documented routes, sorted.
func (s *Spec) Routes() []string {
	out := make([]string, 0, len(s.Operations))
	for r := range s.Operations {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}
