package trainer_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/destination"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/trainer"
)

const foreignDataToken = "foreign-data-token"

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

// foreignServer serves stack and counter behind a data token, and the
// destinations that name it "py" with the token given.
func foreignServer(t *testing.T, token string) *destination.Config {
	t.Helper()
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{stackEnv{}, counter.New()}, DataToken: foreignDataToken, ControlToken: "foreign-control-token"})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	vars := map[string]string{destination.EnvEnvServers: "py=" + hs.URL, destination.DataTokenPrefix + "PY": token}
	dest, err := destination.FromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, destination.Defaults{EnvURL: "http://127.0.0.1:1"})
	require.NoError(t, err)
	return &dest
}

func stackRequest(t *testing.T, server string) trainer.SubmitRequest {
	t.Helper()
	rows, err := trainer.ReadTasks(strings.NewReader("{\"script\":[[{\"name\":\"push\",\"arguments\":{\"value\":1}}]]}\n\n{\"script\":[]}\n"), "stack")
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, []int{1, 3}, []int{rows[0].Line, rows[1].Line})
	return trainer.SubmitRequest{Set: "foreign", Rows: rows, Repeats: 2, EnvServer: server}
}

// TestDeclaredEnvironmentIsSubmitted: an environment not in the catalog,
// declared by the named server, is admitted, runs at that server with the
// generic scripted policy and the workflow's turn limit.
func TestDeclaredEnvironmentIsSubmitted(t *testing.T) {
	dest := foreignServer(t, foreignDataToken)
	req := stackRequest(t, "py")
	require.ErrorContains(t, req.Validate(), `unknown environment "stack"`, "without the server's declaration, only the catalog's environments")
	assert.Equal(t, []string{"stack"}, req.ForeignEnvs())

	require.NoError(t, trainer.Declare(context.Background(), &req, dest, nil))
	inputs, err := trainer.BuildInputs(req)
	require.NoError(t, err)
	require.Len(t, inputs, 4)
	for _, in := range inputs {
		assert.Equal(t, "stack", in.Env.Name)
		assert.Equal(t, "py", in.Env.Server)
		assert.Equal(t, envs.ScriptModel, in.Policy.Model)
	}
	assert.JSONEq(t, `{"script":[[{"name":"push","arguments":{"value":1}}]]}`, string(inputs[0].Task))
	assert.Equal(t, "foreign-row1-r0", inputs[0].RolloutID)
}

// TestUndeclaredEnvironmentIsRefused names the environment and the server.
func TestUndeclaredEnvironmentIsRefused(t *testing.T) {
	dest := foreignServer(t, foreignDataToken)
	req := stackRequest(t, "py")
	for i := range req.Rows {
		req.Rows[i].Env = "heap"
	}
	err := trainer.Declare(context.Background(), &req, dest, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "environment heap is neither in the catalog")
	assert.Contains(t, err.Error(), "nor served by environment server py")
	assert.Contains(t, err.Error(), "which declares: counter, stack")
	assert.Nil(t, req.Declared, "a refusal changes nothing")

	req = stackRequest(t, "elsewhere")
	require.ErrorContains(t, trainer.Declare(context.Background(), &req, dest, nil), "elsewhere")

	dest = foreignServer(t, "wrong-token")
	req = stackRequest(t, "py")
	err = trainer.Declare(context.Background(), &req, dest, nil)
	require.ErrorContains(t, err, "ask environment server py")
	require.ErrorContains(t, err, "unauthorized")
}

// TestCatalogRequestAsksNoServer: a request of catalog environments only
// is left as it was, and nothing is fetched.
func TestCatalogRequestAsksNoServer(t *testing.T) {
	rows, err := trainer.ReadTasks(strings.NewReader(`{"target":3}`), "counter")
	require.NoError(t, err)
	req := trainer.SubmitRequest{Set: "c", Rows: rows, Repeats: 1, EnvServer: "nowhere"}
	require.NoError(t, trainer.Declare(context.Background(), &req, &destination.Config{}, nil))
	assert.Nil(t, req.Declared)
	inputs, err := trainer.BuildInputs(req)
	require.NoError(t, err)
	assert.Equal(t, envs.ScriptedModel("counter"), inputs[0].Policy.Model)
}

// TestReadTasksRefusesBadLines lists every bad line.
func TestReadTasksRefusesBadLines(t *testing.T) {
	_, err := trainer.ReadTasks(strings.NewReader("{\"a\":1}\n{oops\n[1,\n"), "stack")
	var de *trainer.DatasetError
	require.ErrorAs(t, err, &de)
	require.Len(t, de.Rows, 2)
	assert.Equal(t, []int{2, 3}, []int{de.Rows[0].Line, de.Rows[1].Line})
	_, err = trainer.ReadTasks(strings.NewReader("\n\n"), "stack")
	require.ErrorContains(t, err, "no tasks")
}
