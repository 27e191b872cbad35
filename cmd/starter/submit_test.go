package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/envserver"
)

// runStarter runs the starter's command line without a Temporal server
// (--dry-run, or a refusal before connecting).
func runStarter(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestSubmitModes(t *testing.T) {
	dir := t.TempDir()
	rows := filepath.Join(dir, "rows.jsonl")
	require.NoError(t, os.WriteFile(rows, []byte(`{"id":"a","env":"counter","task":{"target":3}}`+"\n"+`{"env":"blackjack","task":{"rounds":3}}`+"\n"), 0o600))
	tasks := filepath.Join(dir, "tasks.jsonl")
	require.NoError(t, os.WriteFile(tasks, []byte(`{"target":3}`+"\n"+`{"target":4}`+"\n"), 0o600))
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"env":"chess","task":{}}`+"\n"+`not json`+"\n"), 0o600))
	tests := []struct {
		args []string
		want string // in the output, or in the error
		ok   bool
	}{
		{[]string{"--tasks", rows, "--repeats", "3"}, "would start 6 rollouts of set s1", true},
		{[]string{"--tasks", rows, "--repeats", "3"}, "in 2 groups of 3, each with a retry budget of 2", true},
		{[]string{"--tasks", rows, "--repeats", "2", "--group-retries", "5"}, "in 2 groups of 2, each with a retry budget of 5", true},
		{[]string{"--tasks", rows, "--group-retries", "-1"}, "--group-retries -1", false},
		{[]string{"--count", "2", "--env", "counter", "--group-retries", "1"}, "--group-retries needs --tasks", false},
		{[]string{"--count", "2", "--env", "counter"}, "2 × counter", true},
		{[]string{"--tasks", tasks, "--env", "counter"}, "2 × counter, policy scripted-counter", true},
		{[]string{"--tasks", rows, "--env", "counter"}, "line 1: environment counter refuses the task", false},
		{[]string{"--tasks", tasks, "--env", "counter,blackjack"}, "name one environment", false},
		{[]string{"--tasks", rows, "--count", "2"}, "were all set", false},
		{[]string{"--tasks", rows, "--seed", "2"}, "were all set", false},
		{[]string{"--env", "counter", "--repeats", "2"}, "--repeats needs --tasks", false},
		{[]string{"--tasks", rows, "--repeats", "0"}, "--repeats 0", false},
		{[]string{"--tasks", bad}, "line 1: env: unknown environment \"chess\"", false},
		{[]string{"--tasks", bad}, "line 2: bad JSON", false},
		{[]string{"--tasks", filepath.Join(dir, "missing.jsonl")}, "--tasks: open", false},
	}
	for _, tt := range tests {
		out, err := runStarter(t, append([]string{"submit", "--set", "s1", "--dry-run"}, tt.args...)...)
		if !assert.Equal(t, tt.ok, err == nil, "%v: err = %v, want ok %v\n%s", tt.args, err, tt.ok, out) {
			continue
		}
		got := out
		if err != nil {
			got = err.Error()
		}
		assert.Contains(t, got, tt.want, "%v: %q, want it to mention %q", tt.args, got, tt.want)
	}
}

// TestSubmitForeignEnvironment: `submit --env-server NAME --env ENV
// --tasks FILE` of an environment the catalog does not hold asks the
// named server (with its data token) and starts the tasks there with the
// generic scripted policy; an environment the server does not declare is
// refused, naming it and the server.
func TestSubmitForeignEnvironment(t *testing.T) {
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{stackEnv{}}, DataToken: "d-token", ControlToken: "c-token"})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	defer hs.Close()
	t.Setenv("TURNSTILE_ENV_SERVERS", "py="+hs.URL)
	t.Setenv("TURNSTILE_DATA_TOKEN_PY", "d-token")
	tasks := filepath.Join(t.TempDir(), "tasks.jsonl")
	require.NoError(t, os.WriteFile(tasks, []byte(`{"script":[]}`+"\n"), 0o600))

	out, err := runStarter(t, "submit", "--set", "s1", "--dry-run", "--env-server", "py", "--env", "stack", "--tasks", tasks)
	require.NoError(t, err, out)
	assert.Contains(t, out, "1 × stack, policy scripted, max turns")

	out, err = runStarter(t, "submit", "--set", "s1", "--dry-run", "--env-server", "py", "--env", "heap", "--tasks", tasks)
	require.Error(t, err, out)
	assert.Contains(t, err.Error(), "environment heap is neither in the catalog")
	assert.Contains(t, err.Error(), "nor served by environment server py")
}

// stackEnv is an environment the catalog does not hold; only its
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
