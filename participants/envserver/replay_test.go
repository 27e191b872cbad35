package envserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// replayEnv is the counter declared replay under name: it exports nothing,
// and the same calls in the same order answer the same.
type replayEnv struct {
	name string
	wrap func(envs.Session) envs.Session
}

func (e replayEnv) Spec() envs.Spec {
	sp := counter.New().Spec()
	sp.Name, sp.Mode = e.name, envs.ModeReplay
	return sp
}

func (e replayEnv) Start(seed int64, task json.RawMessage) (envs.Session, envs.Start, error) {
	s, st, err := counter.New().Start(seed, task)
	if err != nil || e.wrap == nil {
		return s, st, err
	}
	return e.wrap(s), st, nil
}

func (replayEnv) Restore(json.RawMessage) (envs.Session, error) {
	return nil, envs.Errorf(envs.CodeNotExportable, "a replay env restores by replay")
}

// diceEnv is a nondeterministic replay environment: every answer carries a
// roll no second session repeats, so a replay of it diverges.
func diceEnv() replayEnv {
	var rolls atomic.Int64
	return replayEnv{name: "dice", wrap: func(s envs.Session) envs.Session { return &diceSession{Session: s, rolls: &rolls} }}
}

type diceSession struct {
	envs.Session
	rolls *atomic.Int64
}

func (d *diceSession) Apply(tool string, args json.RawMessage) (envs.Outcome, error) {
	out, err := d.Session.Apply(tool, args)
	out.Observation += fmt.Sprintf(" roll=%d", d.rolls.Add(1))
	return out, err
}

// replayServers are a server that cuts a replay session and a fresh one
// that restores it; restartOnly names environments the first serves
// restart_only.
func replayServers(t *testing.T, env replayEnv, restartOnly ...string) (a, b *ctlFixture) {
	t.Helper()
	with := func(c *envserver.ServerConfig) { c.Envs = append(c.Envs, env) }
	a = newCtlFixture(t, with, func(c *envserver.ServerConfig) { c.RestartOnly = restartOnly })
	return a, newCtlFixture(t, with)
}

// cutReplaySession runs rollout p of env on a: three operations before the
// cut, one after it. It returns the checkpoint's location and the answer of
// the operation after the cut.
func cutReplaySession(t *testing.T, a *ctlFixture, env string) (string, protocol.OperateResponse) {
	t.Helper()
	ctx := context.Background()
	a.startEnv(t, env, "p", 0)
	for rev := range int64(3) {
		a.operate(t, protocol.OperateRequest{Identity: envtest.ID("p", 0, fmt.Sprintf("p/t%d/c0", rev)), ExpectedRevision: rev,
			Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	}
	prep := a.prepare(t, "ck")
	require.Len(t, prep.Sessions, 1)
	dir := filepath.Join(t.TempDir(), "ck")
	_, err := a.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "ck", Location: dir})
	require.NoError(t, err, "commit")
	a.resume(t, "ck")
	after := a.operate(t, protocol.OperateRequest{Identity: envtest.ID("p", 0, "p/t3/c0"), ExpectedRevision: 3,
		Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	return dir, after
}

// TestReplayRestoresSession: a replay session is cut as its receipts
// alone; a fresh server re-applies them (start, then the three operations),
// compares every answer with the recorded one and holds the session again
// at the cut's revision as the new attempt. Nothing counts as applied; the
// request before the cut replays its stored answer and the one after it
// applies once, answering as the original did.
func TestReplayRestoresSession(t *testing.T) {
	ctx := context.Background()
	a, b := replayServers(t, replayEnv{name: "replay"})
	dir, after := cutReplaySession(t, a, "replay")

	res, err := b.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "ck", Location: dir, Attempts: map[string]int{"p": 1}})
	require.NoError(t, err, "restore")
	require.Equal(t, []protocol.SessionSummary{{RolloutID: "p", Attempt: 1, Revision: 3, Env: "replay", Mode: envs.ModeReplay}}, res.Restored)
	require.Empty(t, res.Restarted)
	st, err := b.c.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Applied, "a replay applies nothing: %+v", st)
	require.Equal(t, int64(4), st.Reapplied, "the start and three operations re-applied: %+v", st)
	b.resume(t, "ck")

	info, err := b.c.Session(ctx, "p")
	require.NoError(t, err)
	require.Equal(t, protocol.SessionInfo{RolloutID: "p", Env: "replay", Attempt: 1, Revision: 3}, info)
	pre, err := b.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("p", 1, "p/t2/c0"), ExpectedRevision: 2,
		Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	require.NoError(t, err)
	require.True(t, pre.Replayed, "the pre-cut request replays its stored answer")
	post, err := b.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("p", 1, "p/t3/c0"), ExpectedRevision: 3,
		Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	require.NoError(t, err)
	require.False(t, post.Replayed)
	require.Equal(t, after.Outcome, post.Outcome, "the rebuilt session answers as the original did")
	require.Equal(t, after.Revision, post.Revision)
	st, err = b.c.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Applied, "only the post-cut request applied: %+v", st)
	_, err = b.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("p", 0, "p/t4/c0"), ExpectedRevision: 4,
		Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
}

// TestReplayDivergenceStartsOver: a nondeterministic environment declared
// replay answers its re-applied operations differently; the restore fails
// closed for that rollout alone: no session is installed (the fresh one is
// closed), the fence rises, the answer lists it restarted with the first
// difference, nothing counts as applied, and the new attempt starts over
// at revision 0.
func TestReplayDivergenceStartsOver(t *testing.T) {
	ctx := context.Background()
	a, b := replayServers(t, diceEnv())
	dir, _ := cutReplaySession(t, a, "dice")

	res, err := b.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "ck", Location: dir, Attempts: map[string]int{"p": 1}})
	require.NoError(t, err, "a divergence fails the rollout's replay, not the restore")
	require.Empty(t, res.Restored)
	require.Len(t, res.Restarted, 1)
	got := res.Restarted[0]
	require.Equal(t, "p", got.RolloutID)
	require.Equal(t, 1, got.Attempt)
	require.Equal(t, envs.ModeReplay, got.Mode)
	require.Contains(t, got.Diverged, `operate "p/t0/c0" (revision 1) answered`, "the first difference is named")
	st, err := b.c.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(0), st.Applied, "%+v", st)
	require.Equal(t, 0, st.Sessions, "the diverged session is not installed: %+v", st)
	b.resume(t, "ck")
	_, err = b.c.Session(ctx, "p")
	wantRemote(t, err, http.StatusNotFound, protocol.CodeUnknownSession)
	start, err := b.c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("p", 1, protocol.SeedRequestID("p")), Env: "dice",
		Seed: 1, Task: json.RawMessage(`{"target":9}`)})
	require.NoError(t, err)
	require.False(t, start.Replayed, "attempt 1 starts over")
	require.Equal(t, int64(0), start.Revision)
	_, err = b.c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("p", 0, protocol.SeedRequestID("p")), Env: "dice",
		Seed: 1, Task: json.RawMessage(`{"target":9}`)})
	wantRemote(t, err, http.StatusConflict, protocol.CodeStaleAttempt)
}

// TestReplayNeedsTheRequests: a session cut while its environment was
// served restart_only holds no requests; a server that replays the
// environment finds its log incomplete and starts the rollout over.
func TestReplayNeedsTheRequests(t *testing.T) {
	ctx := context.Background()
	a, b := replayServers(t, replayEnv{name: "replay"}, "replay")
	dir, _ := cutReplaySession(t, a, "replay")
	res, err := b.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "ck", Location: dir, Attempts: map[string]int{"p": 1}})
	require.NoError(t, err)
	require.Empty(t, res.Restored)
	require.Len(t, res.Restarted, 1)
	require.Contains(t, res.Restarted[0].Diverged, "holds no request")
}

// TestRestartOnlyOverride: an environment the server is told to serve
// restart_only says so everywhere a coordinator or a worker reads its mode,
// and a name the server does not host is refused at start.
func TestRestartOnlyOverride(t *testing.T) {
	ctx := context.Background()
	f := newCtlFixture(t, func(c *envserver.ServerConfig) {
		c.Envs = append(c.Envs, replayEnv{name: "replay"})
		c.RestartOnly = []string{"replay"}
	})
	caps, err := f.cc.Capabilities(ctx)
	require.NoError(t, err)
	for _, e := range caps.Envs {
		if e.Name == "replay" {
			require.Equal(t, envs.ModeRestartOnly, e.Mode)
		}
	}
	start, err := f.c.Start(ctx, protocol.StartRequest{Identity: envtest.ID("q", 0, protocol.SeedRequestID("q")), Env: "replay",
		Seed: 1, Task: json.RawMessage(`{"target":9}`)})
	require.NoError(t, err)
	require.Equal(t, envs.ModeRestartOnly, start.Spec.Mode, "the worker reads the mode from the start's spec")

	_, err = envserver.NewServer(envserver.ServerConfig{Envs: []envs.Environment{counter.New()}, InsecureNoDataAuth: true,
		RestartOnly: []string{"nope"}})
	require.ErrorContains(t, err, `restart-only environment "nope" is not hosted`)
}
