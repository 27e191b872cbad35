package workers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// recorder is an HTTP listener that records the Authorization header of
// every request it gets.
type recorder struct {
	mu   sync.Mutex
	auth []string
}

func (r *recorder) serve(t *testing.T, answer http.HandlerFunc) *httptest.Server {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.auth = append(r.auth, req.Header.Get("Authorization"))
		r.mu.Unlock()
		answer(w, req)
	}))
	t.Cleanup(hs.Close)
	return hs
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

// TestWorkerDestinations: a worker configured from its environment sends
// a named server its own data token, follows no redirect (a server that
// answers with another address gets no second request, so the token does
// not travel on), and its coordinator shares the destinations.
func TestWorkerDestinations(t *testing.T) {
	t.Setenv(failpoint.EnvVar, "")
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New()}, DataToken: "data-token-server-b", ControlToken: "control-token-server-b"})
	require.NoError(t, err)
	var named recorder
	b := named.serve(t, srv.ServeHTTP)
	var elsewhere recorder
	target := elsewhere.serve(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	var redirecting recorder
	redirector := redirecting.serve(t, func(w http.ResponseWriter, req *http.Request) {
		http.Redirect(w, req, target.URL+req.URL.Path, http.StatusTemporaryRedirect)
	})

	env := map[string]string{
		workers.EnvTranscriptDir: filepath.Join(t.TempDir(), "transcripts"),
		workers.EnvDataToken:     "data-token-global", workers.EnvControlToken: "control-token-global",
		workers.EnvEnvServers:          "b=" + b.URL + ",r=" + redirector.URL,
		"TURNSTILE_DATA_TOKEN_B":       "data-token-server-b",
		"TURNSTILE_CONTROL_TOKEN_B":    "control-token-server-b",
		workers.EnvAllowedParticipants: "http://10.9.9.9:*",
	}
	cfg, err := workers.ConfigFromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	acts, err := workers.NewActivities(cfg)
	require.NoError(t, err)
	coord := workers.NewCoordinator(nil, cfg, acts)
	require.Same(t, acts.Destinations, coord.Destinations, "the coordinator shares the worker's destinations")
	require.Same(t, acts.Destinations, acts.Environment.Destinations)
	require.Same(t, acts.Destinations, acts.Model.Destinations)

	var suite testsuite.WorkflowTestSuite
	start := func(server string) error {
		ae := suite.NewTestActivityEnvironment()
		ae.RegisterActivity(acts.Environment)
		_, err := ae.ExecuteActivity(acts.Environment.StartEnvironment, rollout.StartEnvironmentInput{RolloutID: "w-" + server, Attempt: 0,
			Env: rollout.EnvRef{Name: counter.Name, Server: server}, Task: json.RawMessage(`{"target":1}`)})
		return err
	}
	require.NoError(t, start("b"), "server b by name, with its own data token")
	require.Equal(t, []string{"Bearer data-token-server-b"}, named.seen())

	require.Error(t, start("r"))
	require.Equal(t, []string{"Bearer data-token-global"}, redirecting.seen())
	require.Empty(t, elsewhere.seen(), "a redirect is not followed: the token goes nowhere else")

	require.ErrorContains(t, start("nope"), workers.EnvEnvServers)
	require.Len(t, named.seen(), 1)
}
