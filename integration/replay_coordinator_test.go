package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestRecordedCoordinatorHistoriesReplay records a real Checkpoint and a real
// Restore history, on the flow of TestCheckpointKillEverythingRestore at a
// small scale: a few counter rollouts are checkpointed mid-flight, every
// process is killed, and fresh ones restore the checkpoint as new attempts,
// which finish. Each history is exported with the Temporal CLI as JSON and
// replayed against the current workflow code. With TURNSTILE_UPDATE_REPLAY=1
// they also refresh the fixtures checkpoint/testdata/checkpoint.json and
// checkpoint/testdata/restore.json that the checkpoint package replays
// without a server.
//
// The recorded inputs hold the checkpoint root (a temporary directory of the
// test) and the environment server's loopback URL; replay reads neither.
func TestRecordedCoordinatorHistoriesReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	// A slow model keeps the rollouts between turns when the cut comes.
	c.startPolicyServer("--latency", "500ms", "--jitter", "0s")
	c.startWorker()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const set, count, cpID = "replay-cp", 3, "cp-replay"
	for i := range count {
		c.submit(ctx, counterInput(set, i, 6))
	}
	env := c.dataClient(c.envURL)
	c.waitFor("set mid-flight", nil, 2*time.Minute, func() bool {
		for i := range count {
			info, err := env.Session(ctx, fmt.Sprintf("%s-%04d", set, i))
			if err != nil || info.Revision < 1 || info.Retired {
				return false
			}
		}
		return true
	})

	root := filepath.Join(c.dir, "checkpoints")
	cpRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.CheckpointWorkflowID(cpID), TaskQueue: rollout.TaskQueue,
	}, checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{
		CheckpointID: cpID, Set: set, Root: root, Participants: []string{c.envURL}, Timeout: "60s",
	})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, cpRun.Get(ctx, &cp))
	require.Equal(t, count, cp.Members+cp.Closed)
	require.Positive(t, cp.Parked, "some rollouts parked mid-flight")
	require.True(t, cp.Resumed)
	// The history lives in this dev server: export it before it dies.
	c.checkReplay(ctx, cpRun, "checkpoint.json")

	// Everything dies; only the checkpoint directory survives.
	c.killAll()
	require.NoError(t, os.RemoveAll(c.store))
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "20ms", "--jitter", "0s")
	c.startWorker()

	rsRun, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: checkpoint.RestoreWorkflowID(cpID), TaskQueue: rollout.TaskQueue,
	}, checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: cpID, Root: root, Participants: []string{c.envURL}})
	require.NoError(t, err)
	var rs checkpoint.RestoreResult
	require.NoError(t, rsRun.Get(ctx, &rs))
	require.Equal(t, cp.Members, rs.Restored+rs.StartedOver+rs.OfferedAgain)
	require.Positive(t, rs.Restored, "some rollouts continue from their boundary as a new attempt")
	for id := range readRecords(t, root, cpID) {
		var res rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, rollout.WorkflowID(id), "").Get(ctx, &res), id)
		require.Equal(t, 1.0, res.Reward, id)
		require.Equal(t, 1, res.Attempt, "%s: finished as the restored attempt", id)
	}
	c.checkReplay(ctx, rsRun, "restore.json")
}

// checkReplay exports a coordinator workflow's history with the Temporal CLI
// and replays it against the current Checkpoint, Restore and Watchdog code; with
// TURNSTILE_UPDATE_REPLAY=1 it writes it to checkpoint/testdata/<fixture>.
func (c *cluster) checkReplay(ctx context.Context, run client.WorkflowRun, fixture string) {
	c.t.Helper()
	out, err := c.temporalCLI(ctx, "workflow", "show", "--workflow-id", run.GetID(), "--run-id", run.GetRunID(), "--output", "json")
	require.NoError(c.t, err, out)
	path := filepath.Join(c.t.TempDir(), fixture)
	require.NoError(c.t, os.WriteFile(path, []byte(out), 0o644))

	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(checkpoint.Checkpoint, workflow.RegisterOptions{Name: checkpoint.CheckpointWorkflowName})
	r.RegisterWorkflowWithOptions(checkpoint.Restore, workflow.RegisterOptions{Name: checkpoint.RestoreWorkflowName})
	r.RegisterWorkflowWithOptions(checkpoint.Watchdog, workflow.RegisterOptions{Name: checkpoint.WatchdogWorkflowName})
	require.NoError(c.t, r.ReplayWorkflowHistoryFromJSONFile(nil, path), fixture)

	if os.Getenv("TURNSTILE_UPDATE_REPLAY") == "1" {
		dst := filepath.Join(bins.root, "workflows", "checkpoint", "testdata", fixture)
		require.NoError(c.t, os.MkdirAll(filepath.Dir(dst), 0o755))
		require.NoError(c.t, os.WriteFile(dst, []byte(out), 0o644))
	}
}
