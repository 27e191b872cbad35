package checkpoint_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

func restoreInput() checkpoint.RestoreInput {
	return checkpoint.RestoreInput{CheckpointID: "ck1", Root: "/ckpt", Participants: []string{"http://127.0.0.1:3", "http://127.0.0.1:4"}}
}

func runRestore(t *testing.T, c *coord, in checkpoint.RestoreInput) (checkpoint.RestoreResult, error) {
	t.Helper()
	env := testsupport.NewWorkflowEnv()
	c.register(env)
	// The activities that end a restore session.
	env.RegisterActivityWithOptions(func(_ context.Context, in checkpoint.ResumeRestoredParticipantsInput) (checkpoint.ResumeParticipantsResult, error) {
		return checkpoint.ResumeParticipantsResult{Resumed: len(in.Participants)}, c.record(checkpoint.ResumeRestoredParticipantsName, in)
	}, activity.RegisterOptions{Name: checkpoint.ResumeRestoredParticipantsName})
	env.RegisterActivityWithOptions(func(_ context.Context, in checkpoint.ResumeRestoredRolloutsInput) (checkpoint.ResumeRolloutsResult, error) {
		return checkpoint.ResumeRolloutsResult{Resumed: 3}, c.record(checkpoint.ResumeRestoredRolloutsName, in)
	}, activity.RegisterOptions{Name: checkpoint.ResumeRestoredRolloutsName})
	env.ExecuteWorkflow(checkpoint.Restore, in)
	require.True(t, env.IsWorkflowCompleted())
	var res checkpoint.RestoreResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&res))
	}
	return res, err
}

func TestRestoreInstallsEverythingBeforeResuming(t *testing.T) {
	c := newCoord()
	res, err := runRestore(t, c, restoreInput())
	require.NoError(t, err)
	// Validate before touching anything; the set fenced before anything is
	// installed, started or resumed; participants installed before the
	// old runs end and the new ones start; servers resumed before agents.
	require.Equal(t, []string{
		checkpoint.ValidateCheckpointName, checkpoint.PlanAttemptsName, checkpoint.FenceSetName, checkpoint.RestoreParticipantsName,
		checkpoint.TerminateStaleName, checkpoint.StartRestoredName,
		checkpoint.ResumeRestoredParticipantsName, checkpoint.ResumeRestoredRolloutsName,
	}, c.called())
	require.Equal(t, checkpoint.RestoreResult{
		CheckpointID: "ck1", Restored: 1, StartedOver: 1, OfferedAgain: 1, Started: 3, Terminated: 2, AttemptsDigest: "a1",
	}, res)
	start := c.inputs[checkpoint.StartRestoredName].(checkpoint.StartRestoredInput)
	require.Equal(t, rollout.TaskQueue, start.TaskQueue, "an empty task queue means the rollouts' default")
	require.Equal(t, restoreInput().Participants, start.Participants)
	// Without a restore id, the restore is named by its checkpoint.
	require.Equal(t, restoreIDs{"ck1", "ck1", "ck1", "ck1", "ck1", "ck1"}, c.restoreIDs())
	require.Equal(t, checkpoint.FenceSetInput{CheckpointID: "ck1", RestoreID: "ck1", Set: "s1"}, c.inputs[checkpoint.FenceSetName],
		"the fence names the validated checkpoint's set")
}

// restoreIDs are the restore ids the restore's activities got, in order:
// plan, participants, terminate, start, resume participants, resume
// rollouts.
type restoreIDs [6]string

func (c *coord) restoreIDs() restoreIDs {
	c.mu.Lock()
	defer c.mu.Unlock()
	get := func(name string) string {
		switch in := c.inputs[name].(type) {
		case checkpoint.PlanAttemptsInput:
			return in.RestoreID
		case checkpoint.RestoreParticipantsInput:
			return in.RestoreID
		case checkpoint.TerminateStaleInput:
			return in.RestoreID
		case checkpoint.StartRestoredInput:
			return in.RestoreID
		case checkpoint.ResumeRestoredParticipantsInput:
			return in.RestoreID
		case checkpoint.ResumeRestoredRolloutsInput:
			return in.RestoreID
		}
		return "<not called>"
	}
	return restoreIDs{get(checkpoint.PlanAttemptsName), get(checkpoint.RestoreParticipantsName), get(checkpoint.TerminateStaleName),
		get(checkpoint.StartRestoredName), get(checkpoint.ResumeRestoredParticipantsName), get(checkpoint.ResumeRestoredRolloutsName)}
}

// A restore under its own restore id (the trainer rolling back to the same
// checkpoint again) hands that id to every step that installs or resumes,
// so it gets its own attempt map and its own control session at the
// servers; the checkpoint it reads stays the same.
func TestRestoreRunsUnderItsRestoreID(t *testing.T) {
	c := newCoord()
	in := restoreInput()
	in.RestoreID = "ck1-rollback-2"
	_, err := runRestore(t, c, in)
	require.NoError(t, err)
	require.Equal(t, restoreIDs{"ck1-rollback-2", "ck1-rollback-2", "ck1-rollback-2", "ck1-rollback-2", "ck1-rollback-2", "ck1-rollback-2"}, c.restoreIDs())
	require.Equal(t, "ck1", c.inputs[checkpoint.ValidateCheckpointName].(checkpoint.ValidateCheckpointInput).CheckpointID)
	require.Equal(t, "ck1", c.inputs[checkpoint.StartRestoredName].(checkpoint.StartRestoredInput).CheckpointID)
	require.Equal(t, "restore/ck1-rollback-2", checkpoint.RestoreWorkflowID(in.EffectiveRestoreID()))
	require.Equal(t, "restore/ck1", checkpoint.RestoreWorkflowID(restoreInput().EffectiveRestoreID()))

	// A failure names the restore, so the operator re-runs the same one.
	c = newCoord()
	c.fail[checkpoint.StartRestoredName] = temporal.NewNonRetryableApplicationError("attempt conflict", checkpoint.ErrAttemptConflict, nil)
	_, err = runRestore(t, c, in)
	require.ErrorContains(t, err, "restore ck1-rollback-2 of checkpoint ck1 failed in phase start")
}

func TestRestoreValidationFailureTouchesNothing(t *testing.T) {
	c := newCoord()
	c.fail[checkpoint.ValidateCheckpointName] = temporal.NewNonRetryableApplicationError(
		"agents: shard agents-00000.tar sha256 mismatch", checkpoint.ErrCheckpointInvalid, nil)
	_, err := runRestore(t, c, restoreInput())
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae))
	require.Equal(t, checkpoint.ErrRestoreFailed, ae.Type())
	require.Contains(t, err.Error(), "sha256 mismatch")
	require.Contains(t, err.Error(), "nothing was touched")
	require.Equal(t, []string{checkpoint.ValidateCheckpointName}, c.called())
}

func TestRestoreStopsPausedWhenStartFails(t *testing.T) {
	c := newCoord()
	c.fail[checkpoint.StartRestoredName] = temporal.NewNonRetryableApplicationError("attempt conflict", checkpoint.ErrAttemptConflict, nil)
	_, err := runRestore(t, c, restoreInput())
	require.ErrorContains(t, err, "run the same restore again")
	calls := c.called()
	require.NotContains(t, calls, checkpoint.ResumeParticipantsName, "nothing resumes before everything is installed")
	require.NotContains(t, calls, checkpoint.ResumeRolloutsName)
}

func TestRestoreRefusesBadInput(t *testing.T) {
	for name, mod := range map[string]func(*checkpoint.RestoreInput){
		"bad id":         func(in *checkpoint.RestoreInput) { in.CheckpointID = "../x" },
		"relative root":  func(in *checkpoint.RestoreInput) { in.Root = "x" },
		"empty url":      func(in *checkpoint.RestoreInput) { in.Participants = []string{""} },
		"bad restore id": func(in *checkpoint.RestoreInput) { in.RestoreID = "a/b" },
	} {
		t.Run(name, func(t *testing.T) {
			c := newCoord()
			in := restoreInput()
			mod(&in)
			_, err := runRestore(t, c, in)
			var ae *temporal.ApplicationError
			require.True(t, errors.As(err, &ae), "error %v", err)
			require.Equal(t, checkpoint.ErrInvalidCoordinatorInput, ae.Type())
			require.Empty(t, c.called())
		})
	}
}
