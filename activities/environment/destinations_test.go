package environment_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/environment"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// listener records every request it gets and answers 503.
type listener struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newListener(t *testing.T) *listener {
	t.Helper()
	l := &listener{}
	l.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.auth = append(l.auth, r.Header.Get("Authorization"))
		l.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(l.Close)
	return l
}

func (l *listener) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.auth...)
}

// TestDestinationsRefusedBeforeSending: a rollout naming an environment
// server the worker's operator did not configure (by URL or by name) is
// refused non-retryably, naming the setting, and the server hears nothing:
// not the data token, not the control token of a start-over. A named
// server gets its own tokens.
func TestDestinationsRefusedBeforeSending(t *testing.T) {
	evil := newListener(t)
	env := newRealEnv(t)
	lookup := map[string]string{
		destination.EnvEnvServers: "b=" + env.url, "TURNSTILE_DATA_TOKEN_B": authDataToken, "TURNSTILE_CONTROL_TOKEN_B": authControlToken,
		destination.EnvAllowedEnvURLs: evil.URL,
	}
	dest, err := destination.FromLookup(func(k string) (string, bool) { v, ok := lookup[k]; return v, ok },
		destination.Defaults{EnvURL: "http://127.0.0.1:1", DataToken: "global-data", ControlToken: "global-control"})
	require.NoError(t, err)
	acts := &environment.Activities{Store: testsupport.NewStore(t), URL: "http://127.0.0.1:1", DataToken: "global-data", ControlToken: "global-control", Destinations: &dest}
	ae := testsupport.NewActivityEnv(acts)
	refused := func(err error, setting string) {
		t.Helper()
		testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrDestinationRefused, NonRetryable: true, Contains: setting})
	}

	start := counterStart("d", 0)
	start.Env.URL = "http://127.0.0.1:2"
	_, err = ae.ExecuteActivity(acts.StartEnvironment, start)
	refused(err, destination.EnvAllowedEnvURLs)
	start.Env = rollout.EnvRef{Name: counter.Name, Server: "nope"}
	_, err = ae.ExecuteActivity(acts.StartEnvironment, start)
	refused(err, destination.EnvEnvServers)
	operate := rollout.OperateEnvironmentInput{RolloutID: "d", Attempt: 0, RequestID: "d/t0/c0", Env: rollout.EnvRef{Name: counter.Name, URL: "http://attacker.example"},
		Style: "tools", Head: testsupport.MustAppend(t, acts.Store, transcript.Item{Role: "user", Content: "go"})}
	_, err = ae.ExecuteActivity(acts.OperateEnvironment, operate)
	refused(err, destination.EnvAllowedEnvURLs)
	_, err = ae.ExecuteActivity(acts.Verify, rollout.VerifyInput{RolloutID: "d", Attempt: 0, Env: rollout.EnvRef{Name: counter.Name, URL: "http://attacker.example"}})
	refused(err, destination.EnvAllowedEnvURLs)

	// The data plane of an allowlisted URL is not its control plane: a
	// start-over's authorisation there is refused before sending.
	_, err = ae.ExecuteActivity(acts.AuthoriseAttempt, rollout.AuthoriseAttemptInput{RolloutID: "d", Attempt: 1, Env: rollout.EnvRef{Name: counter.Name, URL: evil.URL}})
	refused(err, destination.EnvAllowedParticipants)
	require.Empty(t, evil.seen(), "the control token went nowhere")

	// Server b by name, with its own tokens (the global ones would be
	// refused there): a start, and a start-over through its control plane.
	start = counterStart("d", 0)
	start.Env.Server = "b"
	_, err = ae.ExecuteActivity(acts.StartEnvironment, start)
	require.NoError(t, err)
	start.Attempt = 1
	_, err = ae.ExecuteActivity(acts.StartEnvironment, start)
	require.NoError(t, err, "a start-over installed with b's own control token")
}
