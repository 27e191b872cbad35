package coordinator

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/storage"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestReplayOutcomesDecideTheContinuation: what a participant answered
// about its replay sessions is kept beside the attempt map, and the start
// step continues a replay rollout from its boundary only when its session
// was rebuilt; a divergence, or no answer at all, starts it over.
func TestReplayOutcomesDecideTheContinuation(t *testing.T) {
	ctx := context.Background()
	rdir, err := storage.Dir(t.TempDir())
	require.NoError(t, err)
	resp := protocol.RestoreResponse{
		Restored: []protocol.SessionSummary{
			{RolloutID: "rebuilt", Attempt: 1, Mode: envs.ModeReplay},
			{RolloutID: "exported", Attempt: 1, Mode: envs.ModeExportRestore},
			{RolloutID: "verified", Attempt: 0, Mode: envs.ModeReplay, Retired: true},
		},
		Restarted: []protocol.SessionSummary{
			{RolloutID: "diverged", Attempt: 1, Mode: envs.ModeReplay, Diverged: `operate "x" answered …`},
			{RolloutID: "restart", Attempt: 1, Mode: envs.ModeRestartOnly},
		},
	}
	rf := replaysOf("ck", "r1", 1, resp)
	require.Equal(t, []string{"rebuilt"}, rf.Replayed, "only live replay sessions")
	require.Equal(t, map[string]string{"diverged": `operate "x" answered …`}, rf.Diverged)
	_, err = writeJSONAtomic(ctx, replaysPath(rdir, 1), rf)
	require.NoError(t, err)
	require.Equal(t, "replays-1.json", replaysPath(rdir, 1).name)

	got, err := readReplays(ctx, rdir, "ck", "r1", 3)
	require.NoError(t, err, "participants 0 and 2 were not installed: no file")
	require.Equal(t, replayOutcomes{"rebuilt": true, "diverged": false}, got)
	_, err = readReplays(ctx, rdir, "ck", "other-restore", 3)
	require.ErrorContains(t, err, "is of restore")

	boundary := rollout.Boundary{Seeded: true, EnvMode: envs.ModeReplay}
	for _, tc := range []struct {
		id, mode, kind string
		wantKind       string
		wantResume     bool
		wantReplay     bool
	}{
		{"rebuilt", string(envs.ModeReplay), checkpoint.RestoreContinue, checkpoint.RestoreContinue, true, true},
		{"diverged", string(envs.ModeReplay), checkpoint.RestoreContinue, checkpoint.RestoreStartOver, false, true},
		{"unanswered", string(envs.ModeReplay), checkpoint.RestoreContinue, checkpoint.RestoreStartOver, false, true},
		{"exported", string(envs.ModeExportRestore), checkpoint.RestoreContinue, checkpoint.RestoreContinue, true, false},
		{"offered", string(envs.ModeReplay), checkpoint.RestoreOfferAgain, checkpoint.RestoreOfferAgain, true, false},
	} {
		b := boundary
		b.EnvMode = envs.Mode(tc.mode)
		in := rollout.Input{RolloutID: tc.id, Resume: &b}
		out, kind, replay := settleReplay(in, tc.kind, rollout.ParkRecord{Boundary: b}, got)
		require.Equal(t, tc.wantKind, kind, tc.id)
		require.Equal(t, tc.wantResume, out.Resume != nil, "%s: resumes from its boundary", tc.id)
		require.Equal(t, tc.wantReplay, replay, tc.id)
	}
}
