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

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func TestNewRefusesNoToken(t *testing.T) {
	if _, err := New(Config{}, &fakeBackend{}); err == nil {
		t.Fatal("a gateway without a token and without --insecure-no-auth was built")
	}
	if _, err := New(Config{Token: " padded "}, &fakeBackend{}); err == nil {
		t.Fatal("a padded token was accepted")
	}
	if _, err := New(Config{InsecureNoAuth: true}, &fakeBackend{}); err != nil {
		t.Fatalf("explicitly insecure: %v", err)
	}
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
			if rec.Code != tt.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
			if tt.want == http.StatusUnauthorized {
				expectError(t, rec, http.StatusUnauthorized, CodeUnauthorized, "")
				if rec.Header().Get("WWW-Authenticate") == "" {
					t.Error("no WWW-Authenticate header")
				}
			}
		})
	}
	if n := f.count("Submit"); n != 1 {
		t.Errorf("Submit called %d times, want once (the authorized call)", n)
	}
	for _, open := range []string{"/healthz", "/v1/openapi.json"} {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", open, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("GET %s without a token: %d", open, rec.Code)
		}
	}
}

func TestInsecureNoAuth(t *testing.T) {
	s := newTestServer(t, &fakeBackend{runs: 1}, func(c *Config) { c.Token, c.InsecureNoAuth = "", true })
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/sets/s1/results", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
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
	if res != (SubmitResponse{Set: "s1", RequestID: "sub-1", Rollouts: 3, Started: 2, Existing: 1}) {
		t.Errorf("response %+v", res)
	}
	if !got.RequireAck || got.RequestID != "sub-1" || got.Deadline != 10*time.Minute || got.ModelCallRetries != 3 || *got.Sampling.Temperature != 0.5 {
		t.Errorf("client request %+v", got)
	}
}

func TestSubmitDatasetPath(t *testing.T) {
	root := t.TempDir()
	path := root + "/rows.jsonl"
	if err := writeFile(path, `{"id":"q1","env":"counter","task":{"target":2}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	var got trainer.SubmitRequest
	f := &fakeBackend{submit: func(r trainer.SubmitRequest) (trainer.SubmitResult, error) {
		got = r
		return trainer.SubmitResult{Inputs: make([]rollout.Input, 2), Started: 2}, nil
	}}
	s := newTestServer(t, f, func(c *Config) { c.DatasetRoot = root })
	rec := call(t, s, "POST", "/v1/sets", fmt.Sprintf(`{"request_id":"d1","set":"d1","dataset_path":%q,"repeats":2,"require_ack":false}`, path))
	decodeOK[SubmitResponse](t, rec, http.StatusOK)
	if len(got.Rows) != 1 || got.Rows[0].ID != "q1" || got.Repeats != 2 || got.RequireAck {
		t.Errorf("client request %+v", got)
	}
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
			if tt.backendErr == nil && f.count("Submit") != 0 {
				t.Error("a refused submission reached the backend")
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
	if res.Set != "s1" || res.Overall.Completed != 1 || len(res.ByEnv) != 1 || res.Health.State != trainer.HealthOK {
		t.Errorf("response %+v", res)
	}
	f.summary = nil
	expectError(t, call(t, s, "GET", "/v1/sets/s1", ""), http.StatusNotFound, CodeNotFound, "set")
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
	if string(gotToken) != "tok" || gotSize != 7 {
		t.Errorf("backend asked token %q size %d", gotToken, gotSize)
	}
	if len(res.Results) != 2 || !res.Results[0].Held || res.Results[0].Status != "completed" || res.Results[1].Status != "failed" || res.Results[1].Failure != "boom" {
		t.Errorf("results %+v", res.Results)
	}
	if tok, _ := base64.RawURLEncoding.DecodeString(res.NextPageToken); string(tok) != "next" {
		t.Errorf("next page token %q", res.NextPageToken)
	}
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results?page_size=0", ""), http.StatusBadRequest, CodeBadRequest, "page_size")
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results?page_size=x", ""), http.StatusBadRequest, CodeBadRequest, "page_size")
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results?page_token=%25%25", ""), http.StatusBadRequest, CodeBadRequest, "page_token")
	f.runs = 0
	expectError(t, call(t, s, "GET", "/v1/sets/s1/results", ""), http.StatusNotFound, CodeNotFound, "set")
}

func TestExport(t *testing.T) {
	f := &fakeBackend{runs: 1, export: func(_ string, w io.Writer) error {
		_, err := io.WriteString(w, "{\"rollout_id\":\"a\"}\n{\"rollout_id\":\"b\"}\n")
		return err
	}}
	s := newTestServer(t, f)
	rec := call(t, s, "GET", "/v1/sets/s1/export", "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/x-ndjson" || bytes.Count(rec.Body.Bytes(), []byte("\n")) != 2 {
		t.Fatalf("export: %d %q %q", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
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
		if r := recover(); r != http.ErrAbortHandler {
			t.Fatalf("recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	req := httptest.NewRequest("GET", "/v1/sets/s1/export", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	t.Fatal("the handler returned normally")
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
	if res != (AckResponse{Receipts: 2, Acknowledged: 1, Already: 1}) {
		t.Errorf("response %+v", res)
	}
	if got.Set != "s1" || len(got.Receipts) != 2 || got.Receipts[1].Line != 2 || got.Receipts[1].Receipt.RolloutID != "s1-0001" || got.AllCompleted {
		t.Errorf("client request %+v", got)
	}
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
			if tt.backendErr == nil && f.count("Acknowledge") != 0 {
				t.Error("a refused acknowledgement reached the backend")
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
	if res.Stale != 1 || res.Flagged != 1 || res.Cancelled != 0 || res.Checked != 5 || got.Cancel || got.Version != 10 || got.MaxLag != 2 {
		t.Errorf("flag: response %+v, request %+v", res, got)
	}
	res = decodeOK[PolicyVersionResponse](t, call(t, s, "POST", "/v1/sets/s1/policy_version", `{"request_id":"p2","version":10,"max_lag":2,"action":"cancel"}`), http.StatusOK)
	if res.Cancelled != 1 || res.Flagged != 0 || !got.Cancel {
		t.Errorf("cancel: response %+v", res)
	}
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
	if n := f.count("Staleness"); n != 2 {
		t.Errorf("Staleness called %d times, want 2", n)
	}
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
	if res != (StartedResponse{ID: "k1", WorkflowID: "checkpoint/k1", RunID: "run-9", Existing: true}) {
		t.Errorf("response %+v", res)
	}
	if gotID != "c1" || got.Root != "/ckpt" || got.Timeout != time.Minute || !got.StayPaused || got.Set != "s1" {
		t.Errorf("client request %+v (request id %q)", got, gotID)
	}
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
	if n := f.count("StartCheckpoint"); n != 1 {
		t.Errorf("StartCheckpoint called %d times, want once", n)
	}
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
		}
		return trainer.CoordinatorRun{}, &trainer.NotFoundError{Msg: "no workflow " + workflowID}
	}}
	s := newTestServer(t, f)
	cs := decodeOK[CheckpointStatus](t, call(t, s, "GET", "/v1/checkpoints/k1", ""), http.StatusOK)
	if cs.Status != RunCompleted || cs.Result == nil || cs.Result.Members != 4 {
		t.Errorf("checkpoint status %+v", cs)
	}
	rs := decodeOK[RestoreStatus](t, call(t, s, "GET", "/v1/restores/k1", ""), http.StatusOK)
	if rs.Status != RunFailed || rs.Result != nil || rs.Error != "manifest missing" {
		t.Errorf("restore status %+v", rs)
	}
	expectError(t, call(t, s, "GET", "/v1/checkpoints/k2", ""), http.StatusNotFound, CodeNotFound, "")
	expectError(t, call(t, s, "GET", "/v1/restores/-k2", ""), http.StatusBadRequest, CodeBadRequest, "id")
}

func TestRestore(t *testing.T) {
	var got trainer.RestoreRequest
	f := &fakeBackend{restore: func(r trainer.RestoreRequest, _ string) (trainer.Started, bool, error) {
		got = r
		return trainer.Started{WorkflowID: "restore/again", RunID: "r"}, false, nil
	}}
	s := newTestServer(t, f)
	res := decodeOK[StartedResponse](t, call(t, s, "POST", "/v1/restores", `{"request_id":"r1","checkpoint_id":"k1","restore_id":"again","participants":["http://h:1"]}`), http.StatusAccepted)
	if res.ID != "again" || res.Existing || got.Root != "/ckpt" || got.CheckpointID != "k1" {
		t.Errorf("response %+v, request %+v", res, got)
	}
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
	if res.Rollouts != 3 || got.ControlToken != "ctl" || got.Set != "s1" {
		t.Errorf("response %+v, request %+v", res, got)
	}
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
		if n := f.count(m); n != 0 {
			t.Errorf("%s called %d times by refused requests", m, n)
		}
	}
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
