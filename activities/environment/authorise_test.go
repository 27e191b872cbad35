package environment_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/activities/environment"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

const (
	authDataToken    = "rollout-test-data-token"
	authControlToken = "rollout-test-control-token"
)

// realEnv is an environment server with both tokens, and a data and a
// control client on it.
type realEnv struct {
	url string
	c   *protocol.Client
	cc  *protocol.ControlClient
}

func newRealEnv(t *testing.T) realEnv {
	t.Helper()
	srv, err := envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New()},
		DataToken: authDataToken, ControlToken: authControlToken})
	require.NoError(t, err)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return realEnv{url: hs.URL, c: protocol.NewDataClient(hs.URL, authDataToken, nil), cc: protocol.NewControlClient(hs.URL, authControlToken, nil)}
}

func counterStart(id string, attempt int) rollout.StartEnvironmentInput {
	return rollout.StartEnvironmentInput{RolloutID: id, Attempt: attempt, Env: rollout.EnvRef{Name: counter.Name},
		Seed: 1, Task: json.RawMessage(`{"target":5}`)}
}

// TestStartOverIsAuthorisedThroughTheControlPlane: a start of attempt N > 0
// that no restore installed is refused attempt_not_installed by the server;
// StartEnvironment then installs the attempt through AuthoriseAttempt and
// starts a fresh episode, and the old attempt is fenced out.
func TestStartOverIsAuthorisedThroughTheControlPlane(t *testing.T) {
	ctx := context.Background()
	env := newRealEnv(t)
	acts := &environment.Activities{Store: testsupport.NewStore(t), URL: env.url, DataToken: authDataToken, ControlToken: authControlToken}
	ae := testsupport.NewActivityEnv(acts)

	_, err := ae.ExecuteActivity(acts.StartEnvironment, counterStart("r", 0))
	require.NoError(t, err)
	_, err = env.c.Operate(ctx, protocol.OperateRequest{Identity: protocol.Identity{RolloutID: "r", Attempt: 0, RequestID: "r/t1/c0"},
		Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":3}`)})
	require.NoError(t, err)

	val, err := ae.ExecuteActivity(acts.StartEnvironment, counterStart("r", 2))
	require.NoError(t, err)
	var res rollout.StartEnvironmentResult
	require.NoError(t, val.Get(&res))
	require.Equal(t, int64(0), res.Revision)
	info, err := env.c.Session(ctx, "r")
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: "r", Env: counter.Name, Attempt: 2}, info)
	_, err = env.c.Operate(ctx, protocol.OperateRequest{Identity: protocol.Identity{RolloutID: "r", Attempt: 0, RequestID: "r/t2/c0"},
		ExpectedRevision: 1, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	require.Equal(t, protocol.CodeStaleAttempt, remoteCode(err))

	// Retried (the activity's reply lost): the installed attempt replays.
	_, err = ae.ExecuteActivity(acts.StartEnvironment, counterStart("r", 2))
	require.NoError(t, err)
	// A run of an attempt below the installed one is fenced off.
	_, err = ae.ExecuteActivity(acts.AuthoriseAttempt, rollout.AuthoriseAttemptInput{RolloutID: "r", Attempt: 1, Env: rollout.EnvRef{Name: counter.Name}})
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrStaleAttempt, NonRetryable: true, Contains: "stale_attempt"})
}

func TestAuthoriseAttemptRefusals(t *testing.T) {
	ctx := context.Background()
	env := newRealEnv(t)
	noControl := &environment.Activities{Store: testsupport.NewStore(t), URL: env.url, DataToken: authDataToken}
	noData := &environment.Activities{Store: testsupport.NewStore(t), URL: env.url, ControlToken: authControlToken}

	_, err := testsupport.NewActivityEnv(noControl).ExecuteActivity(noControl.StartEnvironment, counterStart("r", 1))
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrEnvironment, NonRetryable: true, Contains: protocol.ControlTokenEnvVar})
	_, err = testsupport.NewActivityEnv(noData).ExecuteActivity(noData.StartEnvironment, counterStart("r", 0))
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrEnvironment, NonRetryable: true, Contains: "401 unauthorized"})
	_, err = env.c.Session(ctx, "r")
	require.Equal(t, protocol.CodeUnknownSession, remoteCode(err), "a refused start created a session")

	// A committed cut holds the server: the start-over waits (parked).
	full := &environment.Activities{Store: testsupport.NewStore(t), URL: env.url, DataToken: authDataToken, ControlToken: authControlToken}
	_, err = env.cc.Prepare(ctx, protocol.PrepareRequest{CheckpointID: "k", Deadline: farFuture()})
	require.NoError(t, err)
	_, err = env.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "k", Location: t.TempDir()})
	require.NoError(t, err)
	_, err = testsupport.NewActivityEnv(full).ExecuteActivity(full.AuthoriseAttempt, rollout.AuthoriseAttemptInput{RolloutID: "r", Attempt: 1, Env: rollout.EnvRef{Name: counter.Name}})
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrParked, NonRetryable: true, Contains: "invalid_phase"})
	_, err = env.cc.Resume(ctx, "k")
	require.NoError(t, err)
	_, err = testsupport.NewActivityEnv(full).ExecuteActivity(full.StartEnvironment, counterStart("r", 1))
	require.NoError(t, err)
}

func remoteCode(err error) string {
	var re *protocol.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return ""
}

func farFuture() time.Time { return time.Now().Add(time.Hour) }
