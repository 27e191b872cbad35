package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// The OpenAPI document is the contract other languages build against;
// these tests fail when it and the server drift apart, either way.

type apiDoc struct {
	Paths      map[string]map[string]apiOperation `json:"paths"`
	Components struct {
		Schemas map[string]apiSchema `json:"schemas"`
	} `json:"components"`
}

type apiOperation struct {
	Security    *[]map[string][]string `json:"security"`
	Role        string                 `json:"x-turnstile-role"`
	Description string                 `json:"description"`
	RequestBody *struct {
		Content map[string]struct {
			Schema apiSchema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Schema apiSchema `json:"schema"`
		} `json:"content"`
	} `json:"responses"`
}

type apiSchema struct {
	Ref                  string               `json:"$ref"`
	Type                 string               `json:"type"`
	Properties           map[string]apiSchema `json:"properties"`
	Required             []string             `json:"required"`
	Items                *apiSchema           `json:"items"`
	AdditionalProperties any                  `json:"additionalProperties"`
}

var (
	docOnce sync.Once
	doc     apiDoc
	docErr  error
)

func loadDoc(t testing.TB) apiDoc {
	t.Helper()
	docOnce.Do(func() { docErr = json.Unmarshal(OpenAPI, &doc) })
	require.NoError(t, docErr, "openapi.json")
	return doc
}

// routeStatuses are the server's routes as "METHOD path" → statuses.
func routeStatuses(t *testing.T) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for _, rt := range newTestServer(t, &fakeBackend{}).routes() {
		out[rt.method+" "+rt.pattern] = slices.Sorted(slices.Values(rt.statuses))
	}
	return out
}

// docStatuses are the document's operations as "METHOD path" → statuses.
func docStatuses(t testing.TB) map[string][]int {
	t.Helper()
	out := map[string][]int{}
	for path, ops := range loadDoc(t).Paths {
		for method, op := range ops {
			var codes []int
			for code := range op.Responses {
				n, err := strconv.Atoi(code)
				require.NoError(t, err, "%s %s: response %q is not a status code", method, path, code)
				codes = append(codes, n)
			}
			sort.Ints(codes)
			out[strings.ToUpper(method)+" "+path] = codes
		}
	}
	return out
}

// TestOpenAPIRoutesMatchServer: every route, method and status code the
// server has is in the document, and nothing else is.
func TestOpenAPIRoutesMatchServer(t *testing.T) {
	server, documented := routeStatuses(t), docStatuses(t)
	for op, codes := range server {
		got, ok := documented[op]
		if !assert.True(t, ok, "%s is served but not documented", op) {
			continue
		}
		assert.True(t, slices.Equal(got, codes), "%s: the server answers %v, the document lists %v", op, codes, got)
	}
	for op := range documented {
		_, ok := server[op]
		assert.True(t, ok, "%s is documented but not served", op)
	}
}

// TestOpenAPIAuth: exactly the open routes are documented without
// security, and every documented 401 belongs to a route that asks for the
// token.
func TestOpenAPIAuth(t *testing.T) {
	d := loadDoc(t)
	for _, rt := range newTestServer(t, &fakeBackend{}).routes() {
		op := d.Paths[rt.pattern][strings.ToLower(rt.method)]
		open := op.Security != nil && len(*op.Security) == 0
		assert.Equal(t, rt.open, open, "%s %s: open %v in the server, %v in the document", rt.method, rt.pattern, rt.open, open)
		assert.NotEqual(t, slices.Contains(rt.statuses, http.StatusUnauthorized), rt.open, "%s %s: open %v but 401 listed %v", rt.method, rt.pattern, rt.open, !rt.open)
	}
}

// TestOpenAPIRoles: every route that asks for a token names, in its
// x-turnstile-role and its description, the role the server asks of it;
// exactly the operator routes list 403. Open routes name no role.
func TestOpenAPIRoles(t *testing.T) {
	d := loadDoc(t)
	for _, rt := range newTestServer(t, &fakeBackend{}).routes() {
		op := d.Paths[rt.pattern][strings.ToLower(rt.method)]
		if op.Role != string(rt.role) {
			t.Errorf("%s %s: role %q in the server, x-turnstile-role %q in the document", rt.method, rt.pattern, rt.role, op.Role)
		}
		if rt.open {
			continue
		}
		if !strings.HasPrefix(op.Description, "Role: "+string(rt.role)+" ") {
			t.Errorf("%s %s: the description %q does not start with the role %q", rt.method, rt.pattern, op.Description, rt.role)
		}
		if (rt.role == RoleOperator) != slices.Contains(rt.statuses, http.StatusForbidden) {
			t.Errorf("%s %s: role %s, 403 listed %v", rt.method, rt.pattern, rt.role, !slices.Contains(rt.statuses, http.StatusForbidden))
		}
	}
}

// schemaTypes are the Go types of the document's schemas: field names must
// match both ways.
var schemaTypes = map[string]any{
	"ErrorBody": ErrorBody{}, "ErrorDetail": ErrorDetail{},
	"SubmitRequest": SubmitRequest{}, "SubmitLimits": SubmitLimits{}, "SubmitResponse": SubmitResponse{},
	"MaxInFlightRequest": MaxInFlightRequest{}, "AdmissionResponse": AdmissionResponse{},
	"DatasetRow": trainer.DatasetRow{}, "Sampling": rollout.Sampling{}, "PolicyRef": rollout.PolicyRef{},
	"Summary": trainer.Summary{}, "EnvSummary": trainer.EnvSummary{}, "SetResponse": SetResponse{}, "Health": Health{},
	"FeedResponse": FeedResponse{}, "ExportLine": trainer.ExportLine{}, "Receipt": Receipt{},
	"ResultsResponse": ResultsResponse{}, "ResultRecord": ResultRecord{}, "RolloutResult": rollout.Result{},
	"AckRequest": AckRequest{}, "AckResponse": AckResponse{},
	"PolicyVersionRequest": PolicyVersionRequest{}, "PolicyVersionResponse": PolicyVersionResponse{}, "StaleRollout": StaleRollout{},
	"CheckpointRequest": CheckpointRequest{}, "RestoreRequest": RestoreRequest{}, "StartedResponse": StartedResponse{},
	"CheckpointStatus": CheckpointStatus{}, "CheckpointResult": checkpoint.CheckpointResult{},
	"RestoreStatus": RestoreStatus{}, "RestoreResult": checkpoint.RestoreResult{},
	"ResumeRequest": ResumeRequest{}, "ResumeResponse": ResumeResponse{}, "HealthzResponse": HealthzResponse{},
	"WatchdogRequest": WatchdogRequest{}, "WatchdogResponse": WatchdogResponse{}, "Declaration": checkpoint.Declaration{},
	"ScheduleRequest": ScheduleRequest{}, "ScheduleResponse": ScheduleResponse{}, "ScheduledRun": ScheduledRun{},
	"ScheduleTagRequest": ScheduleTagRequest{}, "ScheduleNoteRequest": ScheduleNoteRequest{},
	"ScheduleTriggerRequest": ScheduleTriggerRequest{}, "StopRequest": StopRequest{}, "StoppedResponse": StoppedResponse{},
	"PinRequest": PinRequest{}, "PinResponse": PinResponse{},
}

// jsonFields are the JSON names of v's fields: from its MarshalJSON when it
// has one (the zero value, so no field is omitted... unless omitempty),
// else from the struct tags, embedded structs flattened.
func jsonFields(typ reflect.Type) []string {
	var out []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "":
			out = append(out, jsonFields(f.Type)...)
		case name == "":
			out = append(out, f.Name)
		default:
			out = append(out, name)
		}
	}
	return out
}

// fieldsOf is jsonFields, with a MarshalJSON's extra names (Summary's
// p50_ms, p95_ms) read from the encoding of the zero value.
func fieldsOf(t *testing.T, v any) []string {
	t.Helper()
	typ := reflect.TypeOf(v)
	if _, ok := v.(json.Marshaler); !ok {
		return slices.Sorted(slices.Values(jsonFields(typ)))
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPISchemasMatchTypes: every schema of the document has the
// fields of its Go type, no more, no fewer; a schema open to additional
// properties (ExportLine, documented in full by its JSON Schema) may list
// fewer. Required fields exist.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	d := loadDoc(t)
	for name, s := range d.Components.Schemas {
		v, ok := schemaTypes[name]
		if !assert.True(t, ok, "schema %s has no Go type in the test", name) {
			continue
		}
		var documented []string
		for p := range s.Properties {
			documented = append(documented, p)
		}
		sort.Strings(documented)
		goFields := fieldsOf(t, v)
		open, _ := s.AdditionalProperties.(bool)
		for _, f := range documented {
			assert.True(t, slices.Contains(goFields, f), "schema %s: field %s is documented but %T has none", name, f, v)
		}
		if !open {
			for _, f := range goFields {
				assert.True(t, slices.Contains(documented, f), "schema %s: %T has field %s, the document does not", name, v, f)
			}
		}
		for _, r := range s.Required {
			assert.True(t, slices.Contains(documented, r), "schema %s: required %s is not a property", name, r)
		}
	}
	for name := range schemaTypes {
		_, ok := d.Components.Schemas[name]
		assert.True(t, ok, "type of schema %s is mapped but the document has no such schema", name)
	}
}

// TestOpenAPIErrorsUseErrorBody: every non-2xx answer of the document is
// an ErrorBody, every 2xx a documented schema or the NDJSON stream.
func TestOpenAPIErrorsUseErrorBody(t *testing.T) {
	for path, ops := range loadDoc(t).Paths {
		for method, op := range ops {
			for code, resp := range op.Responses {
				if code[0] == '2' {
					continue
				}
				ref := resp.Content["application/json"].Schema.Ref
				assert.Equal(t, "#/components/schemas/ErrorBody", ref, "%s %s %s: schema %q, want ErrorBody", method, path, code, ref)
			}
		}
	}
}

// checkDocumented fails the test when a request got a status the document
// does not list for its route (a route not in the document answers 404).
func checkDocumented(t *testing.T, req *http.Request, status int) {
	t.Helper()
	d := loadDoc(t)
	s := newTestServer(t, &fakeBackend{})
	_, pattern := s.mux.Handler(req)
	method, path, ok := strings.Cut(pattern, " ")
	if !ok {
		assert.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, status, "%s %s: %d from no route", req.Method, req.URL.Path, status)
		return
	}
	op, ok := d.Paths[path][strings.ToLower(method)]
	if !assert.True(t, ok, "%s is not documented", pattern) {
		return
	}
	_, ok = op.Responses[strconv.Itoa(status)]
	assert.True(t, ok, "%s answered %d, which the document does not list", pattern, status)
}

// TestOpenAPIServed: the document is served, open, as it is embedded.
func TestOpenAPIServed(t *testing.T) {
	s := newTestServer(t, &fakeBackend{})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	require.Equal(t, http.StatusOK, rec.Code, "GET /v1/openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	require.Equal(t, string(OpenAPI), rec.Body.String(), "GET /v1/openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	require.Equal(t, "application/json", rec.Header().Get("Content-Type"), "GET /v1/openapi.json: %d %q", rec.Code, rec.Header().Get("Content-Type"))
}
