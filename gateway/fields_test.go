package gateway

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// postBodies are a valid body of every POST route (for the fake backend),
// and the fields a route may refuse when absent without the schema
// requiring them: one of several alternatives, described in the schema.
var postBodies = []struct {
	path, schema string
	body         string
	alternatives map[string]bool
}{
	{"/v1/sets", "SubmitRequest", `{"request_id":"r1","set":"s1","envs":["counter"],"count":2}`, map[string]bool{"envs": true, "count": true}},
	{"/v1/sets/s1/acks", "AckRequest", `{"request_id":"a1","receipts":[` + receiptJSON("s1-0000", 'a') + `]}`, nil},
	{"/v1/sets/s1/max_in_flight", "MaxInFlightRequest", `{"request_id":"m1","max_in_flight":8}`, nil},
	{"/v1/sets/s1/policy_version", "PolicyVersionRequest", `{"request_id":"p1","version":3,"max_lag":1,"action":"flag"}`, nil},
	{"/v1/checkpoints", "CheckpointRequest", `{"request_id":"c1","checkpoint_id":"k1","set":"s1","participants":["http://127.0.0.1:8091"],"timeout":"60s"}`, map[string]bool{"timeout": true}},
	{"/v1/restores", "RestoreRequest", `{"request_id":"r1","checkpoint_id":"k1","participants":["http://127.0.0.1:8091"]}`, nil},
	{"/v1/resumes", "ResumeRequest", `{"request_id":"r1","set":"s1","checkpoint_id":"k1","participants":["http://127.0.0.1:8091"]}`, nil},
}

// TestRefusedWhenAbsentIsRequired: a field whose absence the server
// refuses, naming it, is required in the document (a generated client
// must not let a caller leave it out).
func TestRefusedWhenAbsentIsRequired(t *testing.T) {
	d := loadDoc(t)
	for _, pb := range postBodies {
		schema, ok := d.Components.Schemas[pb.schema]
		require.True(t, ok, "no schema %s", pb.schema)
		s := newTestServer(t, &fakeBackend{runs: 1})
		rec := call(t, s, "POST", pb.path, pb.body)
		require.Equal(t, 2, rec.Code/100, "POST %s with the valid body: %d %s", pb.path, rec.Code, rec.Body.String())
		var body map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(pb.body), &body))
		for field := range body {
			without := map[string]json.RawMessage{}
			for k, v := range body {
				if k != field {
					without[k] = v
				}
			}
			b, _ := json.Marshal(without)
			rec := call(t, s, "POST", pb.path, string(b))
			if rec.Code != http.StatusBadRequest {
				continue
			}
			e := errorOf(t, rec).Error
			named := e.Field == field || strings.HasPrefix(e.Field, field+"[") || strings.HasPrefix(e.Field, field+".")
			assert.False(t, named && !pb.alternatives[field] && !slices.Contains(schema.Required, field), "POST %s without %s: 400 %q, but schema %s does not require %s", pb.path, field, e.Message, pb.schema, field)
		}
	}
}

// TestValidationSpeaksJSON: a refused request's message names the
// request's JSON fields, never a command-line flag of the starter that a
// client of the gateway cannot pass.
func TestValidationSpeaksJSON(t *testing.T) {
	tests := []struct {
		name, path, body string
		field, says      string
	}{
		{"checkpoint without participants", "/v1/checkpoints", `{"request_id":"c1","checkpoint_id":"k1","set":"s1","timeout":"60s"}`, "participants", "participants: at least one"},
		{"checkpoint with no participant", "/v1/checkpoints", `{"request_id":"c1","checkpoint_id":"k1","set":"s1","participants":[],"timeout":"60s"}`, "participants", "participants: at least one"},
		{"checkpoint with a bad participant", "/v1/checkpoints", `{"request_id":"c1","checkpoint_id":"k1","set":"s1","participants":["http://h:1","ftp://h:2"],"timeout":"60s"}`, "participants", `participants[1]: "ftp://h:2"`},
		{"checkpoint with a zero timeout", "/v1/checkpoints", `{"request_id":"c1","checkpoint_id":"k1","set":"s1","participants":["http://h:1"],"timeout":"0s"}`, "timeout", "timeout 0s"},
		{"checkpoint with a bad id", "/v1/checkpoints", `{"request_id":"c1","checkpoint_id":"k/1","set":"s1","participants":["http://h:1"],"timeout":"60s"}`, "checkpoint_id", "checkpoint_id"},
		{"restore without participants", "/v1/restores", `{"request_id":"r1","checkpoint_id":"k1"}`, "participants", "participants: at least one"},
		{"restore with a bad restore id", "/v1/restores", `{"request_id":"r1","checkpoint_id":"k1","restore_id":"a/b","participants":["http://h:1"]}`, "restore_id", "restore_id"},
		{"resume without participants", "/v1/resumes", `{"request_id":"r1","set":"s1","checkpoint_id":"k1"}`, "participants", "participants: at least one"},
		{"submit of no rollouts", "/v1/sets", `{"request_id":"r1","set":"s1","envs":["counter"],"count":-1}`, "count", "count -1"},
		{"submit of an unknown environment", "/v1/sets", `{"request_id":"r1","set":"s1","envs":["nope"],"count":1}`, "envs", "envs"},
		{"submit with a bad model url", "/v1/sets", `{"request_id":"r1","set":"s1","envs":["counter"],"count":1,"model_url":"ftp://x"}`, "model_url", "model_url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newTestServer(t, &fakeBackend{runs: 1})
			b := expectError(t, call(t, s, "POST", tt.path, tt.body), http.StatusBadRequest, CodeBadRequest, tt.field)
			assert.NotContains(t, b.Error.Message, "--", "message %q names a flag", b.Error.Message)
			assert.Contains(t, b.Error.Message, tt.says, "message %q does not say %q", b.Error.Message, tt.says)
		})
	}
}
