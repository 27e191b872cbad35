// Package testsupport is what the packages' tests share: fake HTTP answers,
// a transcript store in a temporary directory, the Temporal test
// environments with the allowances CI needs, and checks of the application
// errors activities fail with. Only tests import it.
package testsupport

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
)

// Answer is what a fake server sends: a status and a JSON body (or, for a
// string body, the text as is), with optional headers.
type Answer struct {
	Status int
	Header http.Header
	Body   any
}

// Write sends the answer.
func (a Answer) Write(w http.ResponseWriter) {
	for k, vs := range a.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if s, ok := a.Body.(string); ok {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(a.Status)
		_, _ = w.Write([]byte(s))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(a.Status)
	_ = json.NewEncoder(w).Encode(a.Body)
}

// OK is a 200 answer with body.
func OK(body any) Answer { return Answer{Status: http.StatusOK, Body: body} }

// NewStore is a transcript store in a directory the test removes.
func NewStore(t testing.TB) *transcriptstore.Store {
	t.Helper()
	s, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	return s
}

// MustLoad loads the conversation at head.
func MustLoad(t testing.TB, s *transcriptstore.Store, head transcript.Digest) []transcript.Item {
	t.Helper()
	items, err := s.Load(t.Context(), head)
	require.NoError(t, err)
	return items
}

// MustAppend stores items as a new conversation and returns its head.
func MustAppend(t testing.TB, s *transcriptstore.Store, items ...transcript.Item) transcript.Digest {
	t.Helper()
	head, err := s.AppendAll(t.Context(), "", items...)
	require.NoError(t, err)
	return head
}

// DeadlockAllowance is the test workflow environments' deadlock detection
// timeout: under -race on a loaded CI machine a workflow goroutine ran over
// the SDK's 1 s between yields and failed as a "potential deadlock". A real
// deadlock still fails the test, a minute later.
const DeadlockAllowance = time.Minute

// NewWorkflowEnv is a test workflow environment with DeadlockAllowance.
func NewWorkflowEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetWorkerOptions(worker.Options{DeadlockDetectionTimeout: DeadlockAllowance})
	return env
}

// NewActivityEnv is a test activity environment with acts (a struct whose
// methods are activities) registered.
func NewActivityEnv(acts any) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(acts)
	return env
}

// AppError returns the application error in err's chain, failing the test
// when there is none.
func AppError(t testing.TB, err error) *temporal.ApplicationError {
	t.Helper()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an ApplicationError, got %T: %v", err, err)
	return ae
}

// ErrorWant describes the application error an activity must fail with.
type ErrorWant struct {
	Type         string        // "" = any type
	NonRetryable bool          //
	Delay        time.Duration // NextRetryDelay
	Contains     string        // in the message
}

// CheckError checks that err is the application error want describes.
func CheckError(t testing.TB, err error, want ErrorWant) {
	t.Helper()
	ae := AppError(t, err)
	if want.Type != "" {
		require.Equal(t, want.Type, ae.Type(), "error type; error: %v", err)
	}
	require.Equal(t, want.NonRetryable, ae.NonRetryable(), "non-retryable; error: %v", err)
	require.Equal(t, want.Delay, ae.NextRetryDelay(), "next retry delay; error: %v", err)
	if want.Contains != "" {
		require.Contains(t, err.Error(), want.Contains)
	}
}

// LoopbackDestinations admits, besides the default environment server and
// model endpoint given (either may be empty), every environment server,
// model endpoint, participant and object-store endpoint on loopback, where
// tests' fake servers listen on free ports. The activities send their own
// tokens (no global secrets here).
func LoopbackDestinations(t testing.TB, envURL, modelURL string) *destination.Config {
	t.Helper()
	const loopback = "http://127.0.0.1:*"
	env := map[string]string{
		destination.EnvAllowedEnvURLs: loopback, destination.EnvAllowedModelURLs: loopback,
		destination.EnvAllowedParticipants: loopback, destination.EnvAllowedStoreEndpoints: loopback,
	}
	d, err := destination.FromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		destination.Defaults{EnvURL: envURL, ModelURL: modelURL})
	require.NoError(t, err)
	return &d
}
