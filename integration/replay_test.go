package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRecordedHistoryReplays records a real Rollout history that includes a
// park and a resume, exports it with the Temporal CLI as JSON, and replays it
// against the current workflow code. With TURNSTILE_UPDATE_REPLAY=1 it also
// refreshes the fixture rollout/testdata/rollout-park-resume.json that the
// workflows package replays without a server.
func TestRecordedHistoryReplays(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t, "--latency", "50ms", "--jitter", "0s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	in := counterInput("replay", 0, 4)
	run := c.submit(ctx, in)
	park, err := c.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: run.GetID(), UpdateID: "cp-replay/park", UpdateName: rollout.UpdatePark,
		Args:         []any{rollout.ParkRequest{CheckpointID: "cp-replay", Deadline: time.Now().Add(time.Minute)}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	var rec rollout.ParkRecord
	require.NoError(t, park.Get(ctx, &rec))
	require.Equal(t, rollout.PhaseParked, rec.Phase)
	resume, err := c.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: run.GetID(), UpdateID: "cp-replay/resume", UpdateName: rollout.UpdateResume,
		Args: []any{rollout.ResumeRequest{CheckpointID: "cp-replay"}}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	require.NoError(t, err)
	require.NoError(t, resume.Get(ctx, nil))
	var res rollout.Result
	require.NoError(t, run.Get(ctx, &res))
	require.Equal(t, 1.0, res.Reward)

	out, err := c.temporalCLI(ctx, "workflow", "show", "--workflow-id", run.GetID(), "--run-id", run.GetRunID(), "--output", "json")
	require.NoError(t, err, out)
	path := filepath.Join(t.TempDir(), "history.json")
	require.NoError(t, os.WriteFile(path, []byte(out), 0o644))

	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(rollout.Rollout, workflow.RegisterOptions{Name: rollout.WorkflowName})
	require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, path))

	if os.Getenv("TURNSTILE_UPDATE_REPLAY") == "1" {
		fixture := filepath.Join(bins.root, "workflows", "rollout", "testdata", "rollout-park-resume.json")
		require.NoError(t, os.MkdirAll(filepath.Dir(fixture), 0o755))
		require.NoError(t, os.WriteFile(fixture, []byte(out), 0o644))
	}
}
