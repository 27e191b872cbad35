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

const (
	deadURL        = "http://127.0.0.1:4"
	replacementURL = "http://127.0.0.1:5"
)

func recoverInput() checkpoint.RecoverServerInput {
	return checkpoint.RecoverServerInput{Set: "s1", Server: deadURL, Replacement: replacementURL, Root: "/ckpt"}
}

// runRecover runs RecoverServer over the fake coordinator; plan is what
// PlanRecovery answers.
func runRecover(t *testing.T, c *coord, in checkpoint.RecoverServerInput, plan checkpoint.PlanRecoveryResult) (checkpoint.RecoverServerResult, checkpoint.RecoverStatus, error) {
	t.Helper()
	env := testsupport.NewWorkflowEnv()
	c.register(env)
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, in checkpoint.PlanRecoveryInput) (checkpoint.PlanRecoveryResult, error) {
		return plan, c.record(checkpoint.PlanRecoveryName, in)
	}, checkpoint.PlanRecoveryName)
	reg(func(_ context.Context, in checkpoint.ResumeRestoredParticipantsInput) (checkpoint.ResumeParticipantsResult, error) {
		return checkpoint.ResumeParticipantsResult{Resumed: len(in.Participants)}, c.record(checkpoint.ResumeRestoredParticipantsName, in)
	}, checkpoint.ResumeRestoredParticipantsName)
	reg(func(_ context.Context, in checkpoint.ResumeRestoredRolloutsInput) (checkpoint.ResumeRolloutsResult, error) {
		return checkpoint.ResumeRolloutsResult{Resumed: plan.Affected}, c.record(checkpoint.ResumeRestoredRolloutsName, in)
	}, checkpoint.ResumeRestoredRolloutsName)
	env.ExecuteWorkflow(checkpoint.RecoverServer, in)
	require.True(t, env.IsWorkflowCompleted())
	var res checkpoint.RecoverServerResult
	err := env.GetWorkflowError()
	if err == nil {
		require.NoError(t, env.GetWorkflowResult(&res))
	}
	var st checkpoint.RecoverStatus
	if v, qerr := env.QueryWorkflow(checkpoint.QueryRecoverStatus); qerr == nil {
		require.NoError(t, v.Get(&st))
	}
	return res, st, err
}

func recoverPlan() checkpoint.PlanRecoveryResult {
	return checkpoint.PlanRecoveryResult{CheckpointID: "ck7", Participant: 1, Participants: []string{"http://127.0.0.1:3", replacementURL},
		Affected: 3, Continue: 2, StartOver: 1, Untouched: 5}
}

// The recovery installs the dead server's artifact on the replacement only,
// ends and starts the moved rollouts, and resumes the replacement alone,
// before the rollouts: the healthy server is never called.
func TestRecoverServerTouchesOnlyTheReplacement(t *testing.T) {
	c := newCoord()
	res, st, err := runRecover(t, c, recoverInput(), recoverPlan())
	require.NoError(t, err)
	require.Equal(t, []string{
		checkpoint.PlanRecoveryName, checkpoint.RestoreParticipantsName, checkpoint.TerminateStaleName,
		checkpoint.StartRestoredName, checkpoint.ResumeRestoredParticipantsName, checkpoint.ResumeRestoredRolloutsName,
	}, c.called())
	rid := "recover-" + checkpoint.ServerDigest(deadURL)
	// Continue and StartOver are what the start step started (the fake
	// starts one of each kind), not the plan's 2 and 1: a replay that
	// diverged turns a planned continuation into a start-over.
	require.Equal(t, checkpoint.RecoverServerResult{CheckpointID: "ck7", RestoreID: rid, Participant: 1,
		Affected: 3, Continue: 1, StartOver: 2, Terminated: 2, Started: 3, Untouched: 5}, res)
	require.Equal(t, "done", st.Phase)
	require.Equal(t, res, st.Result)
	rp := c.inputs[checkpoint.RestoreParticipantsName].(checkpoint.RestoreParticipantsInput)
	require.Equal(t, []int{1}, rp.Indexes, "only the dead participant is installed")
	require.Equal(t, recoverPlan().Participants, rp.Participants)
	require.Equal(t, []string{replacementURL}, c.inputs[checkpoint.ResumeRestoredParticipantsName].(checkpoint.ResumeRestoredParticipantsInput).Participants)
	start := c.inputs[checkpoint.StartRestoredName].(checkpoint.StartRestoredInput)
	require.Equal(t, rollout.TaskQueue, start.TaskQueue)
	require.Equal(t, rid, start.RestoreID)
	require.Equal(t, "ck7", start.CheckpointID, "the checkpoint the plan chose")
	require.Equal(t, "recover/s1/"+checkpoint.ServerDigest(deadURL), checkpoint.RecoverServerWorkflowID("s1", deadURL))
}

func TestRecoverServerWithNothingToMove(t *testing.T) {
	c := newCoord()
	plan := recoverPlan()
	plan.Affected, plan.Continue, plan.StartOver = 0, 0, 0
	res, _, err := runRecover(t, c, recoverInput(), plan)
	require.NoError(t, err)
	require.Equal(t, []string{checkpoint.PlanRecoveryName}, c.called())
	require.Zero(t, res.Affected)
}

func TestRecoverServerFailureSaysRunAgain(t *testing.T) {
	c := newCoord()
	c.fail[checkpoint.StartRestoredName] = temporal.NewNonRetryableApplicationError("attempt conflict", checkpoint.ErrAttemptConflict, nil)
	_, _, err := runRecover(t, c, recoverInput(), recoverPlan())
	require.ErrorContains(t, err, "run the same recovery again")
	require.NotContains(t, c.called(), checkpoint.ResumeRestoredParticipantsName, "nothing resumes before the moved rollouts are installed")
}

func TestRecoverServerRefusesBadInput(t *testing.T) {
	for name, mod := range map[string]func(*checkpoint.RecoverServerInput){
		"bad set":         func(in *checkpoint.RecoverServerInput) { in.Set = "a b" },
		"no server":       func(in *checkpoint.RecoverServerInput) { in.Server = "" },
		"bad replacement": func(in *checkpoint.RecoverServerInput) { in.Replacement = "ftp://x" },
		"trailing slash":  func(in *checkpoint.RecoverServerInput) { in.Server += "/" },
		"relative root":   func(in *checkpoint.RecoverServerInput) { in.Root = "ckpt" },
		"bad checkpoint":  func(in *checkpoint.RecoverServerInput) { in.CheckpointID = "../x" },
		"bad request id":  func(in *checkpoint.RecoverServerInput) { in.RequestID = "a/b" },
	} {
		t.Run(name, func(t *testing.T) {
			c := newCoord()
			in := recoverInput()
			mod(&in)
			_, _, err := runRecover(t, c, in, recoverPlan())
			var ae *temporal.ApplicationError
			require.True(t, errors.As(err, &ae), "error %v", err)
			require.Equal(t, checkpoint.ErrInvalidCoordinatorInput, ae.Type())
			require.Empty(t, c.called())
		})
	}
}
