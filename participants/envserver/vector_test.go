package envserver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/envs/arithmetic"
	"github.com/turnstile-rl/turnstile/envs/counter"
	"github.com/turnstile-rl/turnstile/internal/testsupport/envtest"
	"github.com/turnstile-rl/turnstile/participants/envserver"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// TestRestoreTheArtifactVector: the environment server's test vector of
// docs/protocol/ARTIFACT.md (docs/protocol/testdata/envserver-v1) is a
// checkpoint this server restores: the live counter session at its
// revision as the new attempt, its receipts replaying, the verified
// session's verdict kept, the fence-only rollout fenced.
func TestRestoreTheArtifactVector(t *testing.T) {
	ctx := context.Background()
	src := filepath.Join("..", "..", "docs", "protocol", "testdata", "envserver-v1", "checkpoint")
	dir := filepath.Join(t.TempDir(), "ckpt")
	require.NoError(t, os.CopyFS(dir, os.DirFS(src)))
	f := newCtlFixture(t, func(c *envserver.ServerConfig) {
		c.Envs, c.Name = []envs.Environment{counter.New(), arithmetic.New()}, "env-0"
	})
	res, err := f.cc.Restore(ctx, protocol.RestoreRequest{CheckpointID: "demo-k1", Location: dir,
		Attempts: map[string]int{"demo-0000": 1, "demo-0002": 3}})
	require.NoError(t, err)
	require.Equal(t, "d58248a517f6aac1affb69c7dc02c1d6f8c042b372eacad9c21198773fe2b08c", res.ManifestDigest)
	require.Equal(t, []protocol.SessionSummary{
		{RolloutID: "demo-0000", Attempt: 1, Revision: 1, Env: counter.Name, Mode: envs.ModeExportRestore},
		{RolloutID: "demo-0001", Attempt: 0, Revision: 1, Env: arithmetic.Name, Mode: envs.ModeStateless, Retired: true},
	}, res.Restored)
	require.Equal(t, []protocol.FenceSummary{{RolloutID: "demo-0002", Attempt: 3}}, res.Fenced)
	_, err = f.cc.ResumeRestore(ctx, "demo-k1", "demo-k1")
	require.NoError(t, err)

	again, err := f.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("demo-0000", 1, protocol.OperateRequestID("demo-0000", 1, 0)),
		ExpectedRevision: 0, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":2}`)})
	require.NoError(t, err)
	require.True(t, again.Replayed, "the receipt of the cut replays: %+v", again)
	next, err := f.c.Operate(ctx, protocol.OperateRequest{Identity: envtest.ID("demo-0000", 1, protocol.OperateRequestID("demo-0000", 2, 0)),
		ExpectedRevision: 1, Tool: counter.ToolIncrement, Arguments: json.RawMessage(`{"amount":1}`)})
	require.NoError(t, err)
	require.Equal(t, "counter=3", next.Outcome.Observation)
	v, err := f.c.Verify(ctx, protocol.VerifyRequest{Identity: envtest.ID("demo-0001", 0, protocol.VerifyRequestID("demo-0001")), ExpectedRevision: 1})
	require.NoError(t, err)
	require.True(t, v.Replayed)
	require.Equal(t, 1.0, v.Verdict.Reward)
}
