package gateway

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestNewRefusesNoToken(t *testing.T) {
	_, err := New(Config{}, &fakeBackend{})
	require.Error(t, err, "a gateway without a token and without --insecure-no-auth was built")
	_, err = New(Config{Token: " padded "}, &fakeBackend{})
	require.Error(t, err, "a padded token was accepted")
	_, err = New(Config{InsecureNoAuth: true}, &fakeBackend{})
	require.NoError(t, err, "explicitly insecure")
}

// TestAuth: every /v1 route but the document needs the token; a refused
// caller changes nothing.
func TestAuth(t *testing.T) {
	f := &fakeBackend{runs: 1}
	s := newTestServer(t, f)
	submit := `{"request_id":"r1","set":"s1","envs":["counter"],"count":2}`
	tests := []struct {
		name, header string
		want         int
	}{
		{"no header", "", http.StatusUnauthorized},
		{"wrong token", "Bearer nope", http.StatusUnauthorized},
		{"token prefix", "Bearer " + testToken[:4], http.StatusUnauthorized},
		{"basic scheme", "Basic " + testToken, http.StatusUnauthorized},
		{"right token", "Bearer " + testToken, http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("POST", "/v1/sets", strings.NewReader(submit))
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			require.Equal(t, tt.want, rec.Code, "status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			if tt.want == http.StatusUnauthorized {
				expectError(t, rec, http.StatusUnauthorized, CodeUnauthorized, "")
				assert.NotEqual(t, "", rec.Header().Get("WWW-Authenticate"), "no WWW-Authenticate header")
			}
		})
	}
	n := f.count("Submit")
	assert.Equal(t, 1, n, "Submit called %d times, want once (the authorized call)", n)
	for _, open := range []string{"/healthz", "/v1/openapi.json"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", open, nil))
		assert.Equal(t, http.StatusOK, rec.Code, "GET %s without a token: %d", open, rec.Code)
	}
}

func TestInsecureNoAuth(t *testing.T) {
	s := newTestServer(t, &fakeBackend{runs: 1}, func(c *Config) { c.Token, c.InsecureNoAuth = "", true })
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/sets/s1/results", nil))
	require.Equal(t, http.StatusOK, rec.Code, "status %d: %s", rec.Code, rec.Body)
}

func TestUnknownRoute(t *testing.T) {
	s := newTestServer(t, &fakeBackend{})
	rec := call(t, s, "GET", "/v1/nothing", "")
	expectError(t, rec, http.StatusNotFound, CodeNotFound, "")
}

func TestSubmit(t *testing.T) {
	var got trainer.SubmitRequest
	f := &fakeBackend{submit: func(r trainer.SubmitRequest) (trainer.SubmitResult, error) {
		got = r
		return trainer.SubmitResult{Inputs: make([]rollout.Input, r.Count), Started: r.Count - 1, Existing: 1}, nil
	}}
	s := newTestServer(t, f)
	rec := call(t, s, "POST", "/v1/sets", `{"request_id":"sub-1","set":"s1","envs":["counter"],"count":3,
		"limits":{"deadline":"10m","model_call_retries":3},"sampling":{"temperature":0.5}}`)
	res := decodeOK[SubmitResponse](t, rec, http.StatusOK)
	assert.Equal(t, SubmitResponse{Set: "s1", RequestID: "sub-1", Rollouts: 3, Started: 2, Existing: 1}, res, "response")
	require.True(t, got.RequireAck, "client request %+v", got)
	require.Equal(t, "sub-1", got.RequestID, "client request %+v", got)
	require.Equal(t, 10*time.Minute, got.Deadline, "client request %+v", got)
	require.Equal(t, 3, got.ModelCallRetries, "client request %+v", got)
	require.Equal(t, 0.5, *got.Sampling.Temperature, "client request %+v", got)
}

func TestSubmitDatasetPath(t *testing.T) {
	root := t.TempDir()
	path := root + "/rows.jsonl"
	require.NoError(t, writeFile(path, `{"id":"q1","env":"counter","task":{"target":2}}`+"\n"))
	var got trainer.SubmitRequest
	f := &fakeBackend{submit: func(r trainer.SubmitRequest) (trainer.SubmitResult, error) {
		got = r
		return trainer.SubmitResult{Inputs: make([]rollout.Input, 2), Started: 2}, nil
	}}
	s := newTestServer(t, f, func(c *Config) { c.DatasetRoot = root })
	rec := call(t, s, "POST", "/v1/sets", fmt.Sprintf(`{"request_id":"d1","set":"d1","dataset_path":%q,"repeats":2,"require_ack":false}`, path))
	decodeOK[SubmitResponse](t, rec, http.StatusOK)
	require.Len(t, got.Rows, 1, "client request %+v", got)
	require.Equal(t, "q1", got.Rows[0].ID, "client request %+v", got)
	require.Equal(t, 2, got.Repeats, "client request %+v", got)
	require.False(t, got.RequireAck, "client request %+v", got)
}

// TestSubmitRefuses: every malformed submission is a 400 naming its field
// (or a conflict / unavailability from Temporal), and nothing is started.
func TestSubmitRefuses(t *testing.T) {
	tests := []struct {
		name, body  string
		status      int
		code, field string
		backendErr  error
	}{
		{"empty body", ``, 400, CodeBadRequest, "", nil},
		{"not JSON", `{"request_id":`, 400, CodeBadRequest, "", nil},
		{"two values", `{"request_id":"r","set":"s","envs":["counter"],"count":1} {}`, 400, CodeBadRequest, "", nil},
		{"unknown field", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"colour":"red"}`, 400, CodeBadRequest, "colour", nil},
		{"wrong type", `{"request_id":"r","set":"s","envs":["counter"],"count":"many"}`, 400, CodeBadRequest, "count", nil},
		{"nested wrong type", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"sampling":{"top_p":"high"}}`, 400, CodeBadRequest, "sampling.top_p", nil},
		{"no request id", `{"set":"s","envs":["counter"],"count":1}`, 400, CodeBadRequest, "request_id", nil},
		{"bad request id", `{"request_id":"a b","set":"s","envs":["counter"],"count":1}`, 400, CodeBadRequest, "request_id", nil},
		{"bad set", `{"request_id":"r","set":"../s","envs":["counter"],"count":1}`, 400, CodeBadRequest, "set", nil},
		{"no mode", `{"request_id":"r","set":"s"}`, 400, CodeBadRequest, "", nil},
		{"two modes", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"rows":[{"env":"counter","task":{}}]}`, 400, CodeBadRequest, "", nil},
		{"zero count", `{"request_id":"r","set":"s","envs":["counter"]}`, 400, CodeBadRequest, "count", nil},
		{"unknown env", `{"request_id":"r","set":"s","envs":["nope"],"count":1}`, 400, CodeBadRequest, "envs", nil},
		{"bad max turns", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"max_turns":-1}`, 400, CodeBadRequest, "max_turns", nil},
		{"bad duration", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"limits":{"deadline":"soon"}}`, 400, CodeBadRequest, "limits.deadline", nil},
		{"bad temperature", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"sampling":{"temperature":-1}}`, 400, CodeBadRequest, "sampling.temperature", nil},
		{"bad model url", `{"request_id":"r","set":"s","envs":["counter"],"count":1,"model_url":"ftp://x"}`, 400, CodeBadRequest, "model_url", nil},
		{"bad row", `{"request_id":"r","set":"s","rows":[{"env":"nope","task":{}}]}`, 400, CodeBadRequest, "rows", nil},
		{"missing dataset", `{"request_id":"r","set":"s","dataset_path":"/no/such/file.jsonl"}`, 400, CodeBadRequest, "dataset_path", nil},
		{"set exists", `{"request_id":"r","set":"s","envs":["counter"],"count":1}`, 409, CodeConflict, "", &trainer.ConflictError{Msg: "set s exists"}},
		{"no worker", `{"request_id":"r","set":"s","envs":["counter"],"count":1}`, 503, CodeUnavailable, "", &trainer.UnavailableError{Msg: "no worker"}},
		{"temporal down", `{"request_id":"r","set":"s","envs":["counter"],"count":1}`, 503, CodeUnavailable, "", serviceerror.NewUnavailable("down")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeBackend{submit: func(trainer.SubmitRequest) (trainer.SubmitResult, error) {
				return trainer.SubmitResult{}, tt.backendErr
			}}
			s := newTestServer(t, f)
			rec := call(t, s, "POST", "/v1/sets", tt.body)
			expectError(t, rec, tt.status, tt.code, tt.field)
			if tt.backendErr == nil {
				assert.Zero(t, f.count("Submit"), "a refused submission reached the backend")
			}
		})
	}
}

func TestGetSet(t *testing.T) {
	f := &fakeBackend{runs: 2, summary: func(string) (trainer.SetSummary, error) {
		return trainer.SetSummary{Overall: trainer.Summary{Rollouts: 2, Completed: 1, Running: 1}, ByEnv: []trainer.EnvSummary{{Env: "counter", Rollouts: 2}}}, nil
	}}
	s := newTestServer(t, f)
	res := decodeOK[SetResponse](t, call(t, s, "GET", "/v1/sets/s1", ""), http.StatusOK)
	require.Equal(t, "s1", res.Set, "response %+v", res)
	require.Equal(t, 1, res.Overall.Completed, "response %+v", res)
	require.Len(t, res.ByEnv, 1, "response %+v", res)
	require.Equal(t, trainer.HealthOK, res.Health.State, "response %+v", res)
	f.summary = nil
	expectError(t, call(t, s, "GET", "/v1/sets/s1", ""), http.StatusNotFound, CodeNotFound, "set")
	f.admission = true // just submitted: its admission exists, no rollout shows yet
	res = decodeOK[SetResponse](t, call(t, s, "GET", "/v1/sets/s1", ""), http.StatusOK)
	require.Zero(t, res.Overall.Rollouts, "response %+v", res)
	f.admission = false
	expectError(t, call(t, s, "GET", "/v1/sets/bad..name%2Fx", ""), http.StatusBadRequest, CodeBadRequest, "set")
	f.summary = func(string) (trainer.SetSummary, error) { return trainer.SetSummary{}, errTemporalDown }
	expectError(t, call(t, s, "GET", "/v1/sets/s1", ""), http.StatusServiceUnavailable, CodeUnavailable, "")
}

func TestResults(t *testing.T) {
	var gotToken []byte
	var gotSize int
	f := &fakeBackend{runs: 3, resultsPage: func(_ string, token []byte, size int) ([]trainer.RolloutRecord, []byte, error) {
		gotToken, gotSize = token, size
		return []trainer.RolloutRecord{
			{RolloutID: "s1-0000", Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, Result: &rollout.Result{RolloutID: "s1-0000", Receipt: &rollout.Receipt{RolloutID: "s1-0000"}}},
			{RolloutID: "s1-0001", Status: enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, Err: "boom", Attempt: 1},
		}, []byte("next"), nil
	}}
	s := newTestServer(t, f)
	res := decodeOK[ResultsResponse](t, call(t, s, "GET", "/v1/sets/s1/results?page_size=7&page_token="+base64.RawURLEncoding.EncodeToString([]byte("tok")), ""), http.StatusOK)
	require.Equal(t, "tok", string(gotToken), "backend asked token %q size %d", gotToken, gotSize)
	require.Equal(t, 7, gotSize, "backend asked token %q size %d", gotToken, gotSize)
	require.Len(t, res.Results, 2, "results %+v", res.Results)
	require.True(t, res.Results[0].Held, "results %+v", res.Results)
	require.Equal(t, "completed", res.Results[0].Status, "results %+v", res.Results)
	require.Equal(t, "failed", res.Results[1].Status, "results %+v", res.Results)
	require.Equal(t, "boom", res.Results[1].Failure, "results %+v", res.Results)
	tok, _ := base64.RawURLEncoding.DecodeString(res.NextPageToken)
	assert.Equal(t, "next", string(tok), "next page token %q", res.NextPageToken)
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results?page_size=0", ""), http.StatusBadRequest, CodeBadRequest, "page_size")
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results?page_size=x", ""), http.StatusBadRequest, CodeBadRequest, "page_size")
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results?page_token=%25%25", ""), http.StatusBadRequest, CodeBadRequest, "page_token")
	f.runs = 0
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results", ""), http.StatusNotFound, CodeNotFound, "set")
	f.admission = true // just submitted: its admission exists, no rollout shows yet
	f.resultsPage = nil
	res = decodeOK[ResultsResponse](t, call(t, s, "GET", "/v1/sets/s1/results", ""), http.StatusOK)
	require.Empty(t, res.Results, "results %+v", res.Results)
}

func TestExport(t *testing.T) {
	f := &fakeBackend{runs: 1, export: func(_ string, w io.Writer) error {
		_, err := io.WriteString(w, "{\"rollout_id\":\"a\"}\n{\"rollout_id\":\"b\"}\n")
		return err
	}}
	s := newTestServer(t, f)
	rec := call(t, s, "GET", "/v1/sets/s1/export", "")
	require.Equal(t, http.StatusOK, rec.Code, "export: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	require.Equal(t, "application/x-ndjson", rec.Header().Get("Content-Type"), "export: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	require.Equal(t, 2, bytes.Count(rec.Body.Bytes(), []byte("\n")), "export: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	f.export = func(string, io.Writer) error { return errTemporalDown }
	expectError(t, call(t, s, "GET", "/v1/sets/s1/export", ""), http.StatusServiceUnavailable, CodeUnavailable, "")
	f.runs = 0
	expectError(t, call(t, s, "GET", "/v1/sets/s1/export", ""), http.StatusNotFound, CodeNotFound, "set")
	noStore := newTestServer(t, &fakeBackend{runs: 1}, func(c *Config) { c.Transcripts = nil })
	expectError(t, call(t, noStore, "GET", "/v1/sets/s1/export", ""), http.StatusServiceUnavailable, CodeUnavailable, "")
}

// TestExportAbortsMidStream: an error after the first line cannot become a
// status any more; the response is aborted, never passed off as complete.
func TestExportAbortsMidStream(t *testing.T) {
	f := &fakeBackend{runs: 1, export: func(_ string, w io.Writer) error {
		if _, err := io.WriteString(w, "{}\n"); err != nil {
			return err
		}
		return errTemporalDown
	}}
	s := newTestServer(t, f)
	defer func() {
		r := recover()
		require.True(t, r == http.ErrAbortHandler, "recovered %v, want http.ErrAbortHandler", r)
	}()
	req := httptest.NewRequest("GET", "/v1/sets/s1/export", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	require.Fail(t, "the handler returned normally")
}

func receiptJSON(id string, c byte) string {
	return fmt.Sprintf(`{"rollout_id":%q,"attempt":0,"sha256":%q}`, id, strings.Repeat(string(c), 64))
}

func TestAcks(t *testing.T) {
	var got trainer.AckRequest
	f := &fakeBackend{runs: 2, ack: func(r trainer.AckRequest) (trainer.AckSummary, error) {
		got = r
		return trainer.AckSummary{Acknowledged: 1, Already: 1}, nil
	}}
	s := newTestServer(t, f)
	body := `{"request_id":"a1","receipts":[` + receiptJSON("s1-0000", 'a') + "," + receiptJSON("s1-0001", 'b') + `]}`
	res := decodeOK[AckResponse](t, call(t, s, "POST", "/v1/sets/s1/acks", body), http.StatusOK)
	assert.Equal(t, AckResponse{Receipts: 2, Acknowledged: 1, Already: 1}, res, "response")
	require.Equal(t, "s1", got.Set, "client request %+v", got)
	require.Len(t, got.Receipts, 2, "client request %+v", got)
	require.Equal(t, 2, got.Receipts[1].Line, "client request %+v", got)
	require.Equal(t, "s1-0001", got.Receipts[1].Receipt.RolloutID, "client request %+v", got)
	require.False(t, got.AllCompleted, "client request %+v", got)
}

func TestAcksRefuse(t *testing.T) {
	tests := []struct {
		name, body  string
		runs        int
		backendErr  error
		status      int
		code, field string
	}{
		{"no receipts", `{"request_id":"a","receipts":[]}`, 1, nil, 400, CodeBadRequest, "receipts"},
		{"no request id", `{"receipts":[` + receiptJSON("x", 'a') + `]}`, 1, nil, 400, CodeBadRequest, "request_id"},
		{"no rollout id", `{"request_id":"a","receipts":[` + receiptJSON("x", 'a') + `,{"attempt":0,"sha256":"` + strings.Repeat("a", 64) + `"}]}`, 1, nil, 400, CodeBadRequest, "receipts[1].rollout_id"},
		{"short digest", `{"request_id":"a","receipts":[{"rollout_id":"x","attempt":0,"sha256":"abc"}]}`, 1, nil, 400, CodeBadRequest, "receipts[0].sha256"},
		{"upper-case digest", `{"request_id":"a","receipts":[` + receiptJSON("x", 'A') + `]}`, 1, nil, 400, CodeBadRequest, "receipts[0].sha256"},
		{"negative attempt", `{"request_id":"a","receipts":[{"rollout_id":"x","attempt":-1,"sha256":"` + strings.Repeat("a", 64) + `"}]}`, 1, nil, 400, CodeBadRequest, "receipts[0].attempt"},
		{"attempt not a number", `{"request_id":"a","receipts":[{"rollout_id":"x","attempt":"0","sha256":"` + strings.Repeat("a", 64) + `"}]}`, 1, nil, 400, CodeBadRequest, "receipts.attempt"},
		{"no such set", `{"request_id":"a","receipts":[` + receiptJSON("x", 'a') + `]}`, 0, nil, 404, CodeNotFound, "set"},
		{"mismatch", `{"request_id":"a","receipts":[` + receiptJSON("x", 'a') + `]}`, 1, &trainer.ConflictError{Msg: "1 of 1 receipts do not match"}, 409, CodeConflict, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeBackend{runs: tt.runs, ack: func(trainer.AckRequest) (trainer.AckSummary, error) { return trainer.AckSummary{}, tt.backendErr }}
			s := newTestServer(t, f)
			expectError(t, call(t, s, "POST", "/v1/sets/s1/acks", tt.body), tt.status, tt.code, tt.field)
			if tt.backendErr == nil {
				assert.Zero(t, f.count("Acknowledge"), "a refused acknowledgement reached the backend")
			}
		})
	}
}

func TestPolicyVersion(t *testing.T) {
	var got trainer.StalenessRequest
	f := &fakeBackend{runs: 1, staleness: func(r trainer.StalenessRequest) (trainer.StalenessResult, error) {
		got = r
		res := trainer.StalenessResult{Checked: 5, Stale: []trainer.StaleRollout{{RolloutID: "s1-0001", OldestVersion: 3, Lag: 7}}}
		if r.Cancel {
			res.Cancelled = 1
		}
		return res, nil
	}}
	s := newTestServer(t, f)
	res := decodeOK[PolicyVersionResponse](t, call(t, s, "POST", "/v1/sets/s1/policy_version", `{"request_id":"p1","version":10,"max_lag":2,"action":"flag"}`), http.StatusOK)
	require.Equal(t, 1, res.Stale, "flag: response %+v, request %+v", res, got)
	require.Equal(t, 1, res.Flagged, "flag: response %+v, request %+v", res, got)
	require.Equal(t, 0, res.Cancelled, "flag: response %+v, request %+v", res, got)
	require.Equal(t, 5, res.Checked, "flag: response %+v, request %+v", res, got)
	require.False(t, got.Cancel, "flag: response %+v, request %+v", res, got)
	require.Equal(t, int64(10), got.Version, "flag: response %+v, request %+v", res, got)
	require.Equal(t, int64(2), got.MaxLag, "flag: response %+v, request %+v", res, got)
	res = decodeOK[PolicyVersionResponse](t, call(t, s, "POST", "/v1/sets/s1/policy_version", `{"request_id":"p2","version":10,"max_lag":2,"action":"cancel"}`), http.StatusOK)
	require.Equal(t, 1, res.Cancelled, "cancel: response %+v", res)
	require.Equal(t, 0, res.Flagged, "cancel: response %+v", res)
	require.True(t, got.Cancel, "cancel: response %+v", res)
	for body, field := range map[string]string{
		`{"request_id":"p","version":10,"max_lag":2,"action":"drop"}`:  "action",
		`{"request_id":"p","version":-1,"max_lag":2,"action":"flag"}`:  "version",
		`{"request_id":"p","version":1,"max_lag":-2,"action":"flag"}`:  "max_lag",
		`{"request_id":"p","version":1.5,"max_lag":2,"action":"flag"}`: "version",
		`{"version":1,"max_lag":2,"action":"flag"}`:                    "request_id",
	} {
		expectError(t, call(t, s, "POST", "/v1/sets/s1/policy_version", body), http.StatusBadRequest, CodeBadRequest, field)
	}
	f.runs = 0
	expectError(t, call(t, s, "POST", "/v1/sets/s1/policy_version", `{"request_id":"p","version":1,"max_lag":2,"action":"flag"}`), http.StatusNotFound, CodeNotFound, "set")
	n := f.count("Staleness")
	assert.Equal(t, 2, n, "Staleness called %d times, want 2", n)
}

// TestMaxInFlight: the route hands the new max_in_flight to the set's
// admission and answers its counts; a bad value is a 400 naming the field
// and changes nothing; a set without a running admission is a 404.
func TestMaxInFlight(t *testing.T) {
	var got int
	f := &fakeBackend{maxInFlight: func(set string, n int) (trainer.AdmissionStatus, error) {
		if set != "s1" {
			return trainer.AdmissionStatus{}, &trainer.NotFoundError{Msg: "set " + set + " has no running admission"}
		}
		got = n
		return trainer.AdmissionStatus{Set: set, MaxInFlight: n, Running: 3, Queued: 5, Total: 8}, nil
	}}
	s := newTestServer(t, f)
	res := decodeOK[AdmissionResponse](t, call(t, s, "POST", "/v1/sets/s1/max_in_flight", `{"request_id":"m1","max_in_flight":12}`), http.StatusOK)
	require.Equal(t, AdmissionResponse{Set: "s1", MaxInFlight: 12, Running: 3, Queued: 5, Total: 8}, res)
	require.Equal(t, 12, got)
	for body, field := range map[string]string{
		`{"request_id":"m","max_in_flight":0}`:       "max_in_flight",
		`{"request_id":"m","max_in_flight":-3}`:      "max_in_flight",
		`{"request_id":"m","max_in_flight":1000001}`: "max_in_flight",
		`{"request_id":"m","max_in_flight":1.5}`:     "max_in_flight",
		`{"max_in_flight":4}`:                        "request_id",
	} {
		expectError(t, call(t, s, "POST", "/v1/sets/s1/max_in_flight", body), http.StatusBadRequest, CodeBadRequest, field)
	}
	expectError(t, call(t, s, "POST", "/v1/sets/other/max_in_flight", `{"request_id":"m","max_in_flight":4}`), http.StatusNotFound, CodeNotFound, "")
	assert.Equal(t, 2, f.count("SetMaxInFlight"))

	var sub trainer.SubmitRequest
	f.submit = func(r trainer.SubmitRequest) (trainer.SubmitResult, error) {
		sub = r
		return trainer.SubmitResult{Started: r.Count, MaxInFlight: r.MaxInFlight}, nil
	}
	out := decodeOK[SubmitResponse](t, call(t, s, "POST", "/v1/sets", `{"request_id":"r1","set":"s2","envs":["counter"],"count":4,"max_in_flight":7}`), http.StatusOK)
	require.Equal(t, 7, sub.MaxInFlight, "submit passes max_in_flight on")
	require.Equal(t, 7, out.MaxInFlight)
	expectError(t, call(t, s, "POST", "/v1/sets", `{"request_id":"r2","set":"s3","envs":["counter"],"count":4,"max_in_flight":-1}`), http.StatusBadRequest, CodeBadRequest, "")
}

func TestCheckpoint(t *testing.T) {
	var got trainer.CheckpointRequest
	var gotID string
	f := &fakeBackend{checkpoint: func(r trainer.CheckpointRequest, id string) (trainer.Started, bool, error) {
		got, gotID = r, id
		return trainer.Started{WorkflowID: "checkpoint/k1", RunID: "run-9"}, true, nil
	}}
	s := newTestServer(t, f)
	body := `{"request_id":"c1","checkpoint_id":"k1","set":"s1","participants":["http://127.0.0.1:8091"],"timeout":"60s","stay_paused":true}`
	res := decodeOK[StartedResponse](t, call(t, s, "POST", "/v1/checkpoints", body), http.StatusAccepted)
	assert.Equal(t, StartedResponse{ID: "k1", WorkflowID: "checkpoint/k1", RunID: "run-9", Existing: true}, res, "response")
	require.Equal(t, "c1", gotID, "client request %+v (request id %q)", got, gotID)
	require.Equal(t, "/ckpt", got.Root, "client request %+v (request id %q)", got, gotID)
	require.Equal(t, time.Minute, got.Timeout, "client request %+v (request id %q)", got, gotID)
	require.True(t, got.StayPaused, "client request %+v (request id %q)", got, gotID)
	require.Equal(t, "s1", got.Set, "client request %+v (request id %q)", got, gotID)
	for body, field := range map[string]string{
		`{"request_id":"c","checkpoint_id":"k/1","set":"s1","participants":["http://h:1"],"timeout":"60s"}`:                                  "checkpoint_id",
		`{"request_id":"c","checkpoint_id":"k1","set":"s 1","participants":["http://h:1"],"timeout":"60s"}`:                                  "set",
		`{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://h:1"]}`:                                                   "timeout",
		`{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://h:1"],"timeout":"x"}`:                                     "timeout",
		`{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://h:1"],"timeout":"60s","deadline":"2030-01-01T00:00:00Z"}`: "deadline",
		`{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://h:1"],"deadline":"tomorrow"}`:                             "deadline",
		`{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["ftp://h:1"],"timeout":"60s"}`:                                    "participants",
		`{"checkpoint_id":"k1","set":"s1","participants":["http://h:1"],"timeout":"60s"}`:                                                    "request_id",
		`{"request_id":"c","checkpoint_id":"k1","set":"s1","participants":["http://h:1"],"timeout":"60s","root":"/etc"}`:                     "root",
	} {
		t.Run(field, func(t *testing.T) {
			expectError(t, call(t, s, "POST", "/v1/checkpoints", body), http.StatusBadRequest, CodeBadRequest, field)
		})
	}
	n := f.count("StartCheckpoint")
	assert.Equal(t, 1, n, "StartCheckpoint called %d times, want once", n)
	f.checkpoint = func(trainer.CheckpointRequest, string) (trainer.Started, bool, error) {
		return trainer.Started{}, false, &trainer.ConflictError{Msg: "checkpoint/k1 was started by another request"}
	}
	expectError(t, call(t, s, "POST", "/v1/checkpoints", body), http.StatusConflict, CodeConflict, "")
	noRoot := newTestServer(t, &fakeBackend{}, func(c *Config) { c.CheckpointRoot = "" })
	expectError(t, call(t, noRoot, "POST", "/v1/checkpoints", body), http.StatusServiceUnavailable, CodeUnavailable, "")
}

func TestCoordinatorStatus(t *testing.T) {
	f := &fakeBackend{status: func(workflowID string, result any) (trainer.CoordinatorRun, error) {
		switch workflowID {
		case checkpoint.CheckpointWorkflowID("k1"):
			*result.(*checkpoint.CheckpointResult) = checkpoint.CheckpointResult{CheckpointID: "k1", Members: 4}
			return trainer.CoordinatorRun{WorkflowID: workflowID, RunID: "r", Status: RunCompleted}, nil
		case checkpoint.RestoreWorkflowID("k1"):
			return trainer.CoordinatorRun{WorkflowID: workflowID, RunID: "r", Status: RunFailed, Err: "manifest missing"}, nil
		case "checkpoint/every-s1-2026-01-02T15:04:05Z": // a schedule's fire
			return trainer.CoordinatorRun{WorkflowID: workflowID, RunID: "r", Status: RunRunning}, nil
		}
		return trainer.CoordinatorRun{}, &trainer.NotFoundError{Msg: "no workflow " + workflowID}
	}}
	s := newTestServer(t, f)
	cs := decodeOK[CheckpointStatus](t, call(t, s, "GET", "/v1/checkpoints/k1", ""), http.StatusOK)
	require.Equal(t, RunCompleted, cs.Status, "checkpoint status %+v", cs)
	require.NotNil(t, cs.Result, "checkpoint status %+v", cs)
	require.Equal(t, 4, cs.Result.Members, "checkpoint status %+v", cs)
	rs := decodeOK[RestoreStatus](t, call(t, s, "GET", "/v1/restores/k1", ""), http.StatusOK)
	require.Equal(t, RunFailed, rs.Status, "restore status %+v", rs)
	require.Nil(t, rs.Result, "restore status %+v", rs)
	require.Equal(t, "manifest missing", rs.Error, "restore status %+v", rs)
	expectError(t, call(t, s, "GET", "/v1/checkpoints/k2", ""), http.StatusNotFound, CodeNotFound, "")
	expectError(t, call(t, s, "GET", "/v1/restores/-k2", ""), http.StatusBadRequest, CodeBadRequest, "id")
	// A scheduled checkpoint by the id its directory and the schedule's
	// listing give, though its run's workflow ID holds the fire time's colons.
	sc := decodeOK[CheckpointStatus](t, call(t, s, "GET", "/v1/checkpoints/every-s1-2026-01-02T150405Z", ""), http.StatusOK)
	require.Equal(t, "checkpoint/every-s1-2026-01-02T15:04:05Z", sc.WorkflowID, "scheduled checkpoint status %+v", sc)
	require.Equal(t, RunRunning, sc.Status, "scheduled checkpoint status %+v", sc)
	expectError(t, call(t, s, "GET", "/v1/checkpoints/every-s1-2026-01-02T150406Z", ""), http.StatusNotFound, CodeNotFound, "")
}

func TestRestore(t *testing.T) {
	var got trainer.RestoreRequest
	f := &fakeBackend{restore: func(r trainer.RestoreRequest, _ string) (trainer.Started, bool, error) {
		got = r
		return trainer.Started{WorkflowID: "restore/again", RunID: "r"}, false, nil
	}}
	s := newTestServer(t, f)
	res := decodeOK[StartedResponse](t, call(t, s, "POST", "/v1/restores", `{"request_id":"r1","checkpoint_id":"k1","restore_id":"again","participants":["http://h:1"]}`), http.StatusAccepted)
	require.Equal(t, "again", res.ID, "response %+v, request %+v", res, got)
	require.False(t, res.Existing, "response %+v, request %+v", res, got)
	require.Equal(t, "/ckpt", got.Root, "response %+v, request %+v", res, got)
	require.Equal(t, "k1", got.CheckpointID, "response %+v, request %+v", res, got)
	expectError(t, call(t, s, "POST", "/v1/restores", `{"request_id":"r1","checkpoint_id":"k1","restore_id":"a/b","participants":["http://h:1"]}`), http.StatusBadRequest, CodeBadRequest, "restore_id")
	expectError(t, call(t, s, "POST", "/v1/restores", `{"request_id":"r1","checkpoint_id":"","participants":["http://h:1"]}`), http.StatusBadRequest, CodeBadRequest, "checkpoint_id")
	f.restore = func(trainer.RestoreRequest, string) (trainer.Started, bool, error) {
		return trainer.Started{}, false, &trainer.ConflictError{Msg: "restore/k1 is running"}
	}
	expectError(t, call(t, s, "POST", "/v1/restores", `{"request_id":"r2","checkpoint_id":"k1","participants":["http://h:1"]}`), http.StatusConflict, CodeConflict, "")
	noRoot := newTestServer(t, &fakeBackend{}, func(c *Config) { c.CheckpointRoot = "" })
	expectError(t, call(t, noRoot, "POST", "/v1/restores", `{"request_id":"r2","checkpoint_id":"k1","participants":["http://h:1"]}`), http.StatusServiceUnavailable, CodeUnavailable, "")
}

func TestResume(t *testing.T) {
	var got trainer.ResumeRequest
	f := &fakeBackend{resume: func(r trainer.ResumeRequest) (trainer.ResumeSummary, error) {
		got = r
		return trainer.ResumeSummary{Participants: 1, Rollouts: 3}, nil
	}}
	s := newTestServer(t, f)
	body := `{"request_id":"r1","set":"s1","checkpoint_id":"k1","participants":["http://h:1"]}`
	res := decodeOK[ResumeResponse](t, call(t, s, "POST", "/v1/resumes", body), http.StatusOK)
	require.Equal(t, 3, res.Rollouts, "response %+v, request %+v", res, got)
	require.Equal(t, "ctl", got.ControlToken, "response %+v, request %+v", res, got)
	require.Equal(t, "s1", got.Set, "response %+v, request %+v", res, got)
	expectError(t, call(t, s, "POST", "/v1/resumes", `{"request_id":"r1","set":"s1","checkpoint_id":"k1","participants":[]}`), http.StatusBadRequest, CodeBadRequest, "participants")
	noToken := newTestServer(t, &fakeBackend{}, func(c *Config) { c.ControlToken = "" })
	expectError(t, call(t, noToken, "POST", "/v1/resumes", body), http.StatusServiceUnavailable, CodeUnavailable, "")
	f.resume = func(trainer.ResumeRequest) (trainer.ResumeSummary, error) {
		return trainer.ResumeSummary{}, errors.New("server refused")
	}
	expectError(t, call(t, s, "POST", "/v1/resumes", body), http.StatusServiceUnavailable, CodeUnavailable, "")
}

// TestRefusedRequestsChangeNothing: no malformed or unauthenticated
// request reaches a state-changing backend call.
func TestRefusedRequestsChangeNothing(t *testing.T) {
	f := &fakeBackend{runs: 1}
	s := newTestServer(t, f)
	for _, rt := range s.routes() {
		if rt.method != "POST" {
			continue
		}
		path := strings.ReplaceAll(rt.pattern, "{set}", "s1")
		for _, body := range []string{"", "[]", "{", `{"request_id":"x","unknown":1}`, `{"request_id":""}`} {
			call(t, s, "POST", path, body)
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(`{"request_id":"x"}`)))
	}
	for _, m := range mutations {
		n := f.count(m)
		assert.Equal(t, 0, n, "%s called %d times by refused requests", m, n)
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// TestSubmitProgressEveryFollowsTheStallWindow: the rollouts of a gateway
// whose watchdog window is short publish their progress often enough for
// it (at most half the window, at least the rollout's minimum); with the
// default window they keep the rollout's default.
func TestSubmitProgressEveryFollowsTheStallWindow(t *testing.T) {
	for _, tt := range []struct {
		window time.Duration
		want   time.Duration
	}{
		{window: 0, want: 0}, // DefaultStallWindow
		{window: time.Minute, want: 0},
		{window: 5 * time.Second, want: 2500 * time.Millisecond},
		{window: time.Second, want: rollout.MinProgressEvery},
	} {
		var got trainer.SubmitRequest
		f := &fakeBackend{submit: func(r trainer.SubmitRequest) (trainer.SubmitResult, error) {
			got = r
			return trainer.SubmitResult{Inputs: make([]rollout.Input, 1), Started: 1}, nil
		}}
		s := newTestServer(t, f, func(c *Config) { c.StallWindow = tt.window })
		rec := call(t, s, "POST", "/v1/sets", `{"request_id":"p1","set":"p1","envs":["counter"],"count":1}`)
		decodeOK[SubmitResponse](t, rec, http.StatusOK)
		require.Equal(t, tt.want, got.ProgressEvery, "stall window %s", tt.window)
	}
}
