package checkpoint_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

func TestScheduledCheckpointID(t *testing.T) {
	id, err := checkpoint.ScheduledCheckpointID("checkpoint/every-s1-2026-01-02T15:04:05Z")
	require.NoError(t, err)
	require.Equal(t, "every-s1-2026-01-02T150405Z", id)
	_, err = checkpoint.ScheduledCheckpointID("rollout/r1-2026-01-02T15:04:05Z")
	require.ErrorContains(t, err, "starts with checkpoint/")
	_, err = checkpoint.ScheduledCheckpointID("checkpoint/a b")
	require.ErrorContains(t, err, "checkpoint id of workflow ID")
}

// The workflow ID of a scheduled checkpoint is found again from its id,
// so a status lookup by checkpoint id finds the run a schedule started.
func TestScheduledCheckpointWorkflowID(t *testing.T) {
	for _, wid := range []string{"checkpoint/every-s1-2026-01-02T15:04:05Z", "checkpoint/every-a-b-2026-12-31T23:59:59Z"} {
		id, err := checkpoint.ScheduledCheckpointID(wid)
		require.NoError(t, err)
		back, ok := checkpoint.ScheduledCheckpointWorkflowID(id)
		require.True(t, ok, id)
		require.Equal(t, wid, back)
	}
	for _, id := range []string{"cp-1", "2026-01-02T150405Z", "every-s1-2026-01-02T15:04:05Z", "every-s1-2026-13-02T150405Z", "every-s1x2026-01-02T150405Z"} {
		_, ok := checkpoint.ScheduledCheckpointWorkflowID(id)
		require.False(t, ok, "%q is no scheduled checkpoint's id", id)
	}
}

// TestScheduledCheckpointTakesItsIDFromTheWorkflowID: a schedule's fire is
// a checkpoint of its own, named by its workflow ID, and after the commit
// the retention step records the tag and keeps what the input asks.
func TestScheduledCheckpointTakesItsIDFromTheWorkflowID(t *testing.T) {
	c := newCoord()
	in := checkpointInput()
	in.CheckpointID, in.Scheduled, in.Tag, in.Keep = "", true, "step-7", 3
	_, res, err := runCheckpoint(t, c, in, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "checkpoint/every-s1-2026-01-02T15:04:05Z"})
	})
	require.NoError(t, err)
	require.Equal(t, "every-s1-2026-01-02T150405Z", res.CheckpointID)
	require.Equal(t, "/ckpt/every-s1-2026-01-02T150405Z", res.Dir)
	require.Equal(t, []string{
		checkpoint.PrepareParticipantsName, checkpoint.FreezeMembershipName, checkpoint.ParkMembersName,
		checkpoint.CommitCheckpointName, checkpoint.ResumeParticipantsName, checkpoint.ResumeRolloutsName,
		checkpoint.RetainCheckpointsName,
	}, c.called())
	require.Equal(t, checkpoint.RetainCheckpointsInput{
		CheckpointID: "every-s1-2026-01-02T150405Z", Set: "s1", Root: "/ckpt", Tag: "step-7", Keep: 3,
	}, c.inputs[checkpoint.RetainCheckpointsName])
	require.Equal(t, "step-7", res.Tag)
	require.Equal(t, &checkpoint.RetainCheckpointsResult{
		Kept: []string{"every-s1-2026-01-02T150405Z"}, Deleted: []string{"old"}, KeptBytes: 10, FreedBytes: 20,
	}, res.Retention)
}

// TestCheckpointRetentionFailureKeepsTheCommit: the checkpoint is
// committed and resumed even when its retention fails; the result says so.
func TestCheckpointRetentionFailureKeepsTheCommit(t *testing.T) {
	c := newCoord()
	c.fail[checkpoint.RetainCheckpointsName] = errors.New("bucket unreachable")
	in := checkpointInput()
	in.Keep = 2
	_, res, err := runCheckpoint(t, c, in, nil)
	require.NoError(t, err)
	require.True(t, res.Resumed)
	require.Nil(t, res.Retention)
	require.Contains(t, res.RetentionError, "bucket unreachable")
}

func TestScheduledCheckpointRefusesAForeignWorkflowID(t *testing.T) {
	c := newCoord()
	in := checkpointInput()
	in.Scheduled = true
	_, _, err := runCheckpoint(t, c, in, func(env *testsuite.TestWorkflowEnvironment) {
		env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "something-else"})
	})
	require.ErrorContains(t, err, "starts with checkpoint/")
	require.Empty(t, c.called(), "nothing was touched")
}

func TestCheckpointRefusesANegativeKeep(t *testing.T) {
	c := newCoord()
	in := checkpointInput()
	in.Keep = -1
	_, _, err := runCheckpoint(t, c, in, nil)
	require.ErrorContains(t, err, "keep -1")
	require.Empty(t, c.called())
}
