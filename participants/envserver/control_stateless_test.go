package envserver_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// withArithmetic adds the stateless arithmetic environment to a fixture.
func withArithmetic(c *envserver.ServerConfig) { c.Envs = append(c.Envs, arithmetic.New()) }

// A stateless session cut mid-episode continues after a restore: the
// coordinator continues such rollouts at their boundary (nothing to redo),
// so the restored server must hold the session, not only its fence.
func TestStatelessSessionContinuesAfterRestore(t *testing.T) {
	ctx := context.Background()
	a := newCtlFixture(t, withArithmetic)
	_, err := a.c.Start(ctx, protocol.StartRequest{
		Identity: envtest.ID("s", 0, protocol.SeedRequestID("s")), Env: arithmetic.Name, Seed: 1,
		Task: json.RawMessage(`{"a":2,"b":3,"op":"+"}`),
	})
	require.NoError(t, err, "start")
	dir := filepath.Join(t.TempDir(), "ckpt")
	a.prepare(t, "ck")
	_, err = a.cc.Commit(ctx, protocol.CommitRequest{CheckpointID: "ck", Location: dir})
	require.NoError(t, err, "commit")

	b := newCtlFixture(t, withArithmetic)
	res, err := b.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "ck", Location: dir, Attempts: map[string]int{"s": 1}})
	require.NoError(t, err, "restore")
	require.Len(t, res.Restored, 1, "restore = %+v, want the stateless session restored, not restarted", res)
	require.EqualValues(t, "stateless", res.Restored[0].Mode, "restore = %+v, want the stateless session restored, not restarted", res)
	require.Empty(t, res.Restarted, "restore = %+v, want the stateless session restored, not restarted", res)
	b.resume(t, "ck")
	b.operate(t, protocol.OperateRequest{Identity: envtest.ID("s", 1, "s/t0/c0"), Tool: arithmetic.AnswerTool, Arguments: json.RawMessage(`{"value":5}`)})
	v, err := b.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("s", 1, protocol.VerifyRequestID("s")), ExpectedRevision: 1})
	require.NoError(t, err, "verify after restore = %+v, %v; want reward 1", v, err)
	require.Equal(t, float64(1), v.Verdict.Reward, "verify after restore = %+v, %v; want reward 1", v, err)
}
