package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// stackEnv declares an environment the catalog does not hold; only its
// declaration is asked for.
type stackEnv struct{}

func (stackEnv) Spec() envs.Spec {
	return envs.Spec{Name: "stack", Mode: envs.ModeExportRestore, Style: envs.StyleTools}
}

func (stackEnv) Start(int64, json.RawMessage) (envs.Session, envs.Start, error) {
	return nil, envs.Start{}, envs.Errorf(envs.CodeBadTask, "not started in this test")
}

func (stackEnv) Restore(json.RawMessage) (envs.Session, error) {
	return nil, envs.Errorf(envs.CodeBadState, "not restored in this test")
}

// TestSubmitForeignEnvironment: rows of an environment the catalog does
// not hold are admitted when the named environment server declares it
// (asked with the control token the gateway holds), with the generic
// scripted policy; an undeclared one is a 400 naming the environment and
// the server, and nothing starts.
func TestSubmitForeignEnvironment(t *testing.T) {
	const control = "foreign-control"
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{stackEnv{}}, DataToken: "foreign-data", ControlToken: control})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	vars := map[string]string{destination.EnvEnvServers: "py=" + hs.URL}
	dest, err := destination.FromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, destination.Defaults{})
	require.NoError(t, err)

	var got trainer.SubmitRequest
	f := &fakeBackend{submit: func(r trainer.SubmitRequest) (trainer.SubmitResult, error) {
		got = r
		inputs, err := trainer.BuildInputs(r)
		return trainer.SubmitResult{Inputs: inputs}, err
	}}
	s := newTestServer(t, f, func(c *Config) { c.Destinations, c.ControlToken = &dest, control })
	body := `{"request_id":"r","set":"s","env_server":"py","rows":[{"env":"stack","task":{"script":[]}}]}`
	res := decodeOK[SubmitResponse](t, call(t, s, "POST", "/v1/sets", body), http.StatusOK)
	require.Equal(t, 1, res.Rollouts)
	require.Equal(t, []string{"stack"}, []string{got.Declared[0].Name})
	inputs, err := trainer.BuildInputs(got)
	require.NoError(t, err)
	require.Equal(t, rollout.EnvRef{Name: "stack", Server: "py"}, inputs[0].Env)
	require.Equal(t, envs.ScriptModel, inputs[0].Policy.Model)

	submitted := f.count("Submit")
	b := expectError(t, call(t, s, "POST", "/v1/sets", `{"request_id":"r","set":"s","env_server":"py","rows":[{"env":"heap","task":{}}]}`),
		http.StatusBadRequest, CodeBadRequest, "env_server")
	require.Contains(t, b.Error.Message, "environment heap is neither in the catalog")
	require.Contains(t, b.Error.Message, "environment server py")
	b = expectError(t, call(t, s, "POST", "/v1/sets", `{"request_id":"r","set":"s","rows":[{"env":"stack","task":{}}]}`),
		http.StatusBadRequest, CodeBadRequest, "rows")
	require.Contains(t, b.Error.Message, `unknown environment "stack"`, "without env_server, refused as before")
	require.Equal(t, submitted, f.count("Submit"), "a refused submission started nothing")
}
