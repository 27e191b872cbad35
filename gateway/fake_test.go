package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/trainer"
)

// fakeBackend records what the server asked and answers what a test set.
// A nil function answers a zero value; calls counts every call by method.
type fakeBackend struct {
	mu    sync.Mutex
	calls map[string]int

	submit      func(trainer.SubmitRequest) (trainer.SubmitResult, error)
	summary     func(string) (trainer.SetSummary, error)
	runs        int
	admission   bool
	health      func(trainer.HealthRequest) (trainer.Health, error)
	resultsPage func(set string, token []byte, size int) ([]trainer.RolloutRecord, []byte, error)
	export      func(set string, w io.Writer) error
	feed        func(trainer.FeedRequest) (trainer.FeedPage, error)
	ack         func(trainer.AckRequest) (trainer.AckSummary, error)
	staleness   func(trainer.StalenessRequest) (trainer.StalenessResult, error)
	maxInFlight func(set string, n int) (trainer.AdmissionStatus, error)
	checkpoint  func(trainer.CheckpointRequest, string) (trainer.Started, bool, error)
	restore     func(trainer.RestoreRequest, string) (trainer.Started, bool, error)
	status      func(workflowID string, result any) (trainer.CoordinatorRun, error)
	resume      func(trainer.ResumeRequest) (trainer.ResumeSummary, error)
	// auto holds the fake's watchdogs and checkpoint schedules.
	auto automationState
}

func (f *fakeBackend) called(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[name]++
}

func (f *fakeBackend) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

func (f *fakeBackend) Submit(_ context.Context, r trainer.SubmitRequest) (trainer.SubmitResult, error) {
	f.called("Submit")
	if f.submit == nil {
		return trainer.SubmitResult{}, nil
	}
	return f.submit(r)
}

func (f *fakeBackend) Summary(_ context.Context, set string) (trainer.SetSummary, error) {
	f.called("Summary")
	if f.summary == nil {
		return trainer.SetSummary{}, nil
	}
	return f.summary(set)
}

func (f *fakeBackend) CountRuns(context.Context, string) (int, error) {
	f.called("CountRuns")
	return f.runs, nil
}

func (f *fakeBackend) HasAdmission(context.Context, string) (bool, error) {
	f.called("HasAdmission")
	return f.admission, nil
}

func (f *fakeBackend) Health(_ context.Context, r trainer.HealthRequest) (trainer.Health, error) {
	f.called("Health")
	if f.health == nil {
		return trainer.Health{State: trainer.HealthOK, Rollouts: f.runs}, nil
	}
	return f.health(r)
}

func (f *fakeBackend) ResultsPage(_ context.Context, set string, token []byte, size int) ([]trainer.RolloutRecord, []byte, error) {
	f.called("ResultsPage")
	if f.resultsPage == nil {
		return nil, nil, nil
	}
	return f.resultsPage(set, token, size)
}

func (f *fakeBackend) Export(_ context.Context, set string, _ trainer.TranscriptReader, w io.Writer) (trainer.ExportStats, error) {
	f.called("Export")
	if f.export == nil {
		return trainer.ExportStats{}, nil
	}
	return trainer.ExportStats{}, f.export(set, w)
}

func (f *fakeBackend) Feed(_ context.Context, _ trainer.TranscriptReader, r trainer.FeedRequest) (trainer.FeedPage, error) {
	f.called("Feed")
	if f.feed == nil {
		return trainer.FeedPage{Next: r.After}, nil
	}
	return f.feed(r)
}

func (f *fakeBackend) Acknowledge(_ context.Context, r trainer.AckRequest) (trainer.AckSummary, error) {
	f.called("Acknowledge")
	if f.ack == nil {
		return trainer.AckSummary{Acknowledged: len(r.Receipts)}, nil
	}
	return f.ack(r)
}

func (f *fakeBackend) Staleness(_ context.Context, r trainer.StalenessRequest) (trainer.StalenessResult, error) {
	f.called("Staleness")
	if f.staleness == nil {
		return trainer.StalenessResult{}, nil
	}
	return f.staleness(r)
}

func (f *fakeBackend) SetMaxInFlight(_ context.Context, set string, n int) (trainer.AdmissionStatus, error) {
	f.called("SetMaxInFlight")
	if f.maxInFlight == nil {
		return trainer.AdmissionStatus{Set: set, MaxInFlight: n}, nil
	}
	return f.maxInFlight(set, n)
}

func (f *fakeBackend) StartCheckpoint(_ context.Context, r trainer.CheckpointRequest, id string) (trainer.Started, bool, error) {
	f.called("StartCheckpoint")
	if f.checkpoint == nil {
		return trainer.Started{WorkflowID: "checkpoint/" + r.CheckpointID, RunID: "run-1"}, false, nil
	}
	return f.checkpoint(r, id)
}

func (f *fakeBackend) StartRestore(_ context.Context, r trainer.RestoreRequest, id string) (trainer.Started, bool, error) {
	f.called("StartRestore")
	if f.restore == nil {
		return trainer.Started{WorkflowID: "restore/" + r.CheckpointID, RunID: "run-1"}, false, nil
	}
	return f.restore(r, id)
}

func (f *fakeBackend) CoordinatorStatus(_ context.Context, workflowID string, result any) (trainer.CoordinatorRun, error) {
	f.called("CoordinatorStatus")
	if f.status == nil {
		return trainer.CoordinatorRun{WorkflowID: workflowID, RunID: "run-1", Status: RunRunning}, nil
	}
	return f.status(workflowID, result)
}

func (f *fakeBackend) Resume(_ context.Context, r trainer.ResumeRequest) (trainer.ResumeSummary, error) {
	f.called("Resume")
	if f.resume == nil {
		return trainer.ResumeSummary{}, nil
	}
	return f.resume(r)
}

// state-changing backend calls: none may happen on a refused request.
var mutations = []string{"Submit", "Acknowledge", "Staleness", "SetMaxInFlight", "StartCheckpoint", "StartRestore", "Resume",
	"StartWatchdog", "StopWatchdog", "CreateSchedule", "SetScheduleTag", "PauseSchedule", "UnpauseSchedule", "TriggerSchedule", "DeleteSchedule"}

const (
	testToken         = "s3cret-token"
	testOperatorToken = "operator-s3cret"
)

// newTestServer serves f with a token, a checkpoint root, a transcript
// store and a control token.
func newTestServer(t testing.TB, f *fakeBackend, tweak ...func(*Config)) *Server {
	t.Helper()
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	cfg := Config{Token: testToken, OperatorToken: testOperatorToken, CheckpointRoot: "/ckpt", Transcripts: store, ControlToken: "ctl",
		Destinations: testDestinations(t), PollInterval: time.Millisecond}
	for _, fn := range tweak {
		fn(&cfg)
	}
	s, err := New(cfg, f)
	require.NoError(t, err)
	return s
}

// testDestinations is what the test servers admit: the default
// environment server and model endpoint, a named server "b" with a control
// token of its own, and any port of host h as a participant.
func testDestinations(t testing.TB) *destination.Config {
	t.Helper()
	env := map[string]string{
		destination.EnvEnvServers: "b=http://b.internal:8091", "TURNSTILE_CONTROL_TOKEN_B": "ctl-b",
		destination.EnvModelEndpoints: "vllm=http://gpu:8000/v1", destination.EnvAllowedParticipants: "http://h:*",
	}
	d, err := destination.FromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		destination.Defaults{EnvURL: "http://127.0.0.1:8091", ModelURL: "http://127.0.0.1:8092/v1", ControlToken: "ctl"})
	if err != nil {
		t.Fatal(err)
	}
	return &d
}

// operatorRoute reports whether a path is one of the operator role's (for
// any method: the set's watchdog and schedule are read with the trainer
// token, see operatorCall).
func operatorRoute(target string) bool {
	for _, p := range []string{"/v1/checkpoints", "/v1/restores", "/v1/resumes"} {
		if strings.HasPrefix(target, p) {
			return true
		}
	}
	return false
}

// operatorCall reports whether method and target are one of the operator
// role's routes.
func operatorCall(method, target string) bool {
	if operatorRoute(target) {
		return true
	}
	path, _, _ := strings.Cut(target, "?")
	if !strings.HasPrefix(path, "/v1/sets/") || method == "GET" {
		return false
	}
	return strings.HasSuffix(path, "/watchdog") || strings.HasSuffix(path, "/schedule") ||
		(strings.Contains(path, "/schedule/") && !strings.HasSuffix(path, "/schedule/tag"))
}

// call sends a request with the token of the role the route needs and
// returns the recorder; every status a test sees must be one the OpenAPI
// document lists for the route.
func call(t *testing.T, s *Server, method, target, body string) *httptest.ResponseRecorder {
	t.Helper()
	token := testToken
	if operatorCall(method, target) {
		token = testOperatorToken
	}
	return callAs(t, s, token, method, target, body)
}

// callAs is call with the given bearer token ("" sends none).
func callAs(t *testing.T, s *Server, token, method, target, body string) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	checkDocumented(t, req, rec.Code)
	return rec
}

// errorOf decodes an error answer.
func errorOf(t *testing.T, rec *httptest.ResponseRecorder) ErrorBody {
	t.Helper()
	var b ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b), "error body %q", rec.Body.String())
	return b
}

// expectError checks status, code and field of an error answer.
func expectError(t *testing.T, rec *httptest.ResponseRecorder, status int, code, field string) ErrorBody {
	t.Helper()
	require.Equal(t, status, rec.Code, "status %d, want %d: %s", rec.Code, status, rec.Body.String())
	b := errorOf(t, rec)
	require.Equal(t, code, b.Error.Code, "error %+v, want code %q field %q", b.Error, code, field)
	require.Equal(t, field, b.Error.Field, "error %+v, want code %q field %q", b.Error, code, field)
	require.NotEqual(t, "", b.Error.Message, "error without a message")
	return b
}

func decodeOK[T any](t *testing.T, rec *httptest.ResponseRecorder, status int) T {
	t.Helper()
	require.Equal(t, status, rec.Code, "status %d, want %d: %s", rec.Code, status, rec.Body.String())
	var v T
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v), "body %q", rec.Body.String())
	return v
}

var errTemporalDown = errors.New("temporal: connection refused")
