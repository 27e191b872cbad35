package rollout_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/turnstile-rl/turnstile/workflows/rollout"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// answer is what a fake server sends: a status and a JSON body (or, for a
// string body, the text as is), with optional headers.
type answer struct {
	status int
	header http.Header
	body   any
}

func (a answer) write(w http.ResponseWriter) {
	for k, vs := range a.header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if s, ok := a.body.(string); ok {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(a.status)
		_, _ = w.Write([]byte(s))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.status)
	_ = json.NewEncoder(w).Encode(a.body)
}

func ok(body any) answer { return answer{status: http.StatusOK, body: body} }

func envRefusal(status int, code, message string) answer {
	return answer{status: status, body: protocol.ErrorBody{Error: protocol.ErrorDetail{Code: code, Message: message}}}
}

// fakeEnv speaks the environment server's data-plane wire types and records
// every request it gets.
type fakeEnv struct {
	*httptest.Server

	mu       sync.Mutex
	starts   []protocol.StartRequest
	operates []protocol.OperateRequest
	verifies []protocol.VerifyRequest

	start   func(protocol.StartRequest) answer
	operate func(protocol.OperateRequest) answer
	verify  func(protocol.VerifyRequest) answer
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	f := &fakeEnv{}
	mux := http.NewServeMux()
	mux.HandleFunc(protocol.RouteStart, func(w http.ResponseWriter, r *http.Request) {
		var req protocol.StartRequest
		if !decode(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.starts = append(f.starts, req)
		h := f.start
		f.mu.Unlock()
		h(req).write(w)
	})
	mux.HandleFunc(protocol.RouteOperate, func(w http.ResponseWriter, r *http.Request) {
		var req protocol.OperateRequest
		if !decode(w, r, &req) {
			return
		}
		if r.PathValue("rollout_id") != req.RolloutID {
			envRefusal(http.StatusBadRequest, protocol.CodeMalformed, "path and body disagree").write(w)
			return
		}
		f.mu.Lock()
		f.operates = append(f.operates, req)
		h := f.operate
		f.mu.Unlock()
		h(req).write(w)
	})
	mux.HandleFunc(protocol.RouteVerify, func(w http.ResponseWriter, r *http.Request) {
		var req protocol.VerifyRequest
		if !decode(w, r, &req) {
			return
		}
		f.mu.Lock()
		f.verifies = append(f.verifies, req)
		h := f.verify
		f.mu.Unlock()
		h(req).write(w)
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		envRefusal(http.StatusBadRequest, protocol.CodeMalformed, err.Error()).write(w)
		return false
	}
	return true
}

func (f *fakeEnv) startRequests() []protocol.StartRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.StartRequest(nil), f.starts...)
}

func (f *fakeEnv) verifyRequests() []protocol.VerifyRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.VerifyRequest(nil), f.verifies...)
}

func (f *fakeEnv) operateRequests() []protocol.OperateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.OperateRequest(nil), f.operates...)
}

// fakeModel is an OpenAI-compatible Chat Completions endpoint that records
// the request bodies it gets.
type fakeModel struct {
	*httptest.Server

	mu       sync.Mutex
	requests []map[string]any
	answer   func(r *http.Request, body map[string]any) answer
}

func newFakeModel(t *testing.T, fn func(r *http.Request, body map[string]any) answer) *fakeModel {
	t.Helper()
	f := &fakeModel{answer: fn}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.requests = append(f.requests, body)
		f.mu.Unlock()
		f.answer(r, body).write(w)
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

func (f *fakeModel) lastRequest(t *testing.T) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.requests, "the model endpoint got no request")
	return f.requests[len(f.requests)-1]
}

func (f *fakeModel) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func newStore(t *testing.T) *transcriptstore.Store {
	t.Helper()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	return s
}

func newActivityEnv(acts *rollout.Activities) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return env
}

// appError returns the application error in err's chain, failing the test
// when there is none.
func appError(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an ApplicationError, got %T: %v", err, err)
	return ae
}

// errorWant describes the error an activity must fail with.
type errorWant struct {
	typ          string        // "" = any type
	nonRetryable bool          //
	delay        time.Duration // NextRetryDelay
	contains     string        // in the message
}

func checkError(t *testing.T, err error, want errorWant) {
	t.Helper()
	ae := appError(t, err)
	if want.typ != "" {
		require.Equal(t, want.typ, ae.Type(), "error type; error: %v", err)
	}
	require.Equal(t, want.nonRetryable, ae.NonRetryable(), "non-retryable; error: %v", err)
	require.Equal(t, want.delay, ae.NextRetryDelay(), "next retry delay; error: %v", err)
	if want.contains != "" {
		require.Contains(t, err.Error(), want.contains)
	}
}

func mustLoad(t *testing.T, s *transcriptstore.Store, head transcript.Digest) []transcript.Item {
	t.Helper()
	items, err := s.Load(t.Context(), head)
	require.NoError(t, err)
	return items
}

func mustAppend(t *testing.T, s *transcriptstore.Store, items ...transcript.Item) transcript.Digest {
	t.Helper()
	head, err := s.AppendAll(t.Context(), "", items...)
	require.NoError(t, err)
	return head
}
