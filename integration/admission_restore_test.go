package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestAdmissionCheckpointRestoresQueued: a checkpoint of a set with queued
// rollouts records them as not started; everything is killed (the
// transcript store too) and the checkpoint restored: the queued rollouts
// are queued again and every rollout completes exactly once.
func TestAdmissionCheckpointRestoresQueued(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "400ms")
	c.startWorker()
	ts := trainer.New(c.client, rollout.TaskQueue)
	const n, most = 12, 3
	res, err := ts.Submit(ctx, trainer.SubmitRequest{Set: "adm4", Count: n, Envs: []string{"counter"}, Seed: 4, MaxInFlight: most, RequestID: "adm4", RequireAck: true})
	require.NoError(t, err)
	c.waitFor("rollouts running, others queued", nil, 2*time.Minute, func() bool {
		adm, ok, err := ts.Admission(ctx, "adm4")
		return err == nil && ok && adm.Running > 0 && adm.Queued >= n/2
	})
	root := filepath.Join(c.dir, "checkpoints")
	run, err := c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: checkpoint.CheckpointWorkflowID("cp-adm4"), TaskQueue: rollout.TaskQueue},
		checkpoint.CheckpointWorkflowName, checkpoint.CheckpointInput{CheckpointID: "cp-adm4", Set: "adm4", Root: root, Participants: []string{c.envURL}, Timeout: "60s"})
	require.NoError(t, err)
	var cp checkpoint.CheckpointResult
	require.NoError(t, run.Get(ctx, &cp))
	require.Positive(t, cp.Queued, "the checkpoint recorded no queued rollout")
	require.Equal(t, n, cp.Members+cp.Queued, "members and queued rollouts: the whole set")

	c.killAll()
	require.NoError(t, os.RemoveAll(c.store))
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "5ms")
	c.startWorker()
	run, err = c.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: checkpoint.RestoreWorkflowID("cp-adm4"), TaskQueue: rollout.TaskQueue},
		checkpoint.RestoreWorkflowName, checkpoint.RestoreInput{CheckpointID: "cp-adm4", Root: root, Participants: []string{c.envURL}})
	require.NoError(t, err)
	var rs checkpoint.RestoreResult
	require.NoError(t, run.Get(ctx, &rs))
	require.Equal(t, cp.Queued, rs.Queued, "the restore queued again what the checkpoint recorded")

	c.waitSetSettled(ctx, "adm4", n)
	lines, _ := exportLines(t, ctx, c, "adm4", "restored")
	require.Equal(t, inputIDs(res.Inputs), sortedIDs(lines), "every rollout finished once")
	for id, l := range lines {
		require.Equal(t, "completed", l.Status, "%s", id)
	}
}
