package workers_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles"
	"github.com/turnstile-rl/turnstile/internal/tlsfiles/tlstest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/workers"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestActivitiesOverMutualTLS: a worker configured with the CA, a client
// certificate and the data token seeds a session on an environment server
// that requires all three; without the client certificate it cannot.
func TestActivitiesOverMutualTLS(t *testing.T) {
	certs := tlstest.New(t)
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New()}, DataToken: "worker-tls-data-token", ControlToken: "worker-tls-control-token"})
	require.NoError(t, err)
	serverTLS, err := tlsfiles.ServerFiles{Cert: certs.ServerCert, Key: certs.ServerKey, ClientCA: certs.CA}.Config()
	require.NoError(t, err)
	hs := httptest.NewUnstartedServer(srv)
	hs.TLS = serverTLS
	hs.StartTLS()
	t.Cleanup(hs.Close)

	seed := func(t *testing.T, files tlsfiles.ClientFiles) error {
		cfg := workers.Config{TranscriptDir: t.TempDir(), EnvURL: hs.URL, ModelBaseURL: "https://127.0.0.1:1/v1", TaskQueue: "q",
			LogLevel: "info", LogFormat: "json", DataToken: "worker-tls-data-token", ControlToken: "worker-tls-control-token", TLS: files}
		acts, err := workers.NewActivities(cfg)
		require.NoError(t, err)
		var suite testsuite.WorkflowTestSuite
		env := suite.NewTestActivityEnvironment()
		env.RegisterActivity(acts.Environment)
		_, err = env.ExecuteActivity(acts.Environment.StartEnvironment, rollout.StartEnvironmentInput{RolloutID: "r", Attempt: 0,
			Env: rollout.EnvRef{Name: counter.Name}, Task: json.RawMessage(`{"target":1}`)})
		return err
	}
	require.NoError(t, seed(t, tlsfiles.ClientFiles{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey}), "seed over mutual TLS")
	require.Error(t, seed(t, tlsfiles.ClientFiles{CA: certs.CA}), "a worker without a client certificate got through")
	_, err = workers.NewActivities(workers.Config{TranscriptDir: t.TempDir(), EnvURL: hs.URL, ModelBaseURL: hs.URL, TaskQueue: "q",
		LogLevel: "info", LogFormat: "json", TLS: tlsfiles.ClientFiles{CA: "/nonexistent/ca.pem"}})
	require.Error(t, err, "NewActivities accepted a CA file that does not exist")
}
