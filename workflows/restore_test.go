package workflows_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/activities"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/protocol"
	"github.com/turnstile-rl/turnstile/transcript"
	"github.com/turnstile-rl/turnstile/workflows"
)

func restoreInput() workflows.RestoreInput {
	return workflows.RestoreInput{CheckpointID: "ck1", Root: "/ckpt", Participants: []string{"http://127.0.0.1:3", "http://127.0.0.1:4"}}
}

func runRestore(t *testing.T, c *coord, in workflows.RestoreInput) (workflows.RestoreResult, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	c.register(env)
	// The activities that end a restore session.
	env.RegisterActivityWithOptions(func(_ context.Context, in activities.ResumeRestoredParticipantsInput) (activities.ResumeParticipantsResult, error) {
		return activities.ResumeParticipantsResult{Resumed: len(in.Participants)}, c.record(activities.ResumeRestoredParticipantsName, in)
	}, activity.RegisterOptions{Name: activities.ResumeRestoredParticipantsName})
	env.RegisterActivityWithOptions(func(_ context.Context, in activities.ResumeRestoredRolloutsInput) (activities.ResumeRolloutsResult, error) {
		return activities.ResumeRolloutsResult{Resumed: 3}, c.record(activities.ResumeRestoredRolloutsName, in)
	}, activity.RegisterOptions{Name: activities.ResumeRestoredRolloutsName})
	env.ExecuteWorkflow(workflows.Restore, in)
	require.True(t, env.IsWorkflowCompleted())
	var res workflows.RestoreResult
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
	// Validate before touching anything; participants installed before the
	// old runs end and the new ones start; servers resumed before agents.
	require.Equal(t, []string{
		activities.ValidateCheckpointName, activities.PlanAttemptsName, activities.RestoreParticipantsName,
		activities.TerminateStaleName, activities.StartRestoredName,
		activities.ResumeRestoredParticipantsName, activities.ResumeRestoredRolloutsName,
	}, c.called())
	require.Equal(t, workflows.RestoreResult{
		CheckpointID: "ck1", Restored: 1, StartedOver: 1, OfferedAgain: 1, Started: 3, Terminated: 2, AttemptsDigest: "a1",
	}, res)
	start := c.inputs[activities.StartRestoredName].(activities.StartRestoredInput)
	require.Equal(t, workflows.TaskQueue, start.TaskQueue, "an empty task queue means the rollouts' default")
	require.Equal(t, restoreInput().Participants, start.Participants)
	// Without a restore id, the restore is named by its checkpoint.
	require.Equal(t, restoreIDs{"ck1", "ck1", "ck1", "ck1", "ck1", "ck1"}, c.restoreIDs())
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
		case activities.PlanAttemptsInput:
			return in.RestoreID
		case activities.RestoreParticipantsInput:
			return in.RestoreID
		case activities.TerminateStaleInput:
			return in.RestoreID
		case activities.StartRestoredInput:
			return in.RestoreID
		case activities.ResumeRestoredParticipantsInput:
			return in.RestoreID
		case activities.ResumeRestoredRolloutsInput:
			return in.RestoreID
		}
		return "<not called>"
	}
	return restoreIDs{get(activities.PlanAttemptsName), get(activities.RestoreParticipantsName), get(activities.TerminateStaleName),
		get(activities.StartRestoredName), get(activities.ResumeRestoredParticipantsName), get(activities.ResumeRestoredRolloutsName)}
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
	require.Equal(t, "ck1", c.inputs[activities.ValidateCheckpointName].(activities.ValidateCheckpointInput).CheckpointID)
	require.Equal(t, "ck1", c.inputs[activities.StartRestoredName].(activities.StartRestoredInput).CheckpointID)
	require.Equal(t, "restore/ck1-rollback-2", workflows.RestoreWorkflowID(in.EffectiveRestoreID()))
	require.Equal(t, "restore/ck1", workflows.RestoreWorkflowID(restoreInput().EffectiveRestoreID()))

	// A failure names the restore, so the operator re-runs the same one.
	c = newCoord()
	c.fail[activities.StartRestoredName] = temporal.NewNonRetryableApplicationError("attempt conflict", activities.ErrAttemptConflict, nil)
	_, err = runRestore(t, c, in)
	require.ErrorContains(t, err, "restore ck1-rollback-2 of checkpoint ck1 failed in phase start")
}

func TestRestoreValidationFailureTouchesNothing(t *testing.T) {
	c := newCoord()
	c.fail[activities.ValidateCheckpointName] = temporal.NewNonRetryableApplicationError(
		"agents: shard agents-00000.tar sha256 mismatch", activities.ErrCheckpointInvalid, nil)
	_, err := runRestore(t, c, restoreInput())
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae))
	require.Equal(t, workflows.ErrRestoreFailed, ae.Type())
	require.Contains(t, err.Error(), "sha256 mismatch")
	require.Contains(t, err.Error(), "nothing was touched")
	require.Equal(t, []string{activities.ValidateCheckpointName}, c.called())
}

func TestRestoreStopsPausedWhenStartFails(t *testing.T) {
	c := newCoord()
	c.fail[activities.StartRestoredName] = temporal.NewNonRetryableApplicationError("attempt conflict", activities.ErrAttemptConflict, nil)
	_, err := runRestore(t, c, restoreInput())
	require.ErrorContains(t, err, "run the same restore again")
	calls := c.called()
	require.NotContains(t, calls, activities.ResumeParticipantsName, "nothing resumes before everything is installed")
	require.NotContains(t, calls, activities.ResumeRolloutsName)
}

func TestRestoreRefusesBadInput(t *testing.T) {
	for name, mod := range map[string]func(*workflows.RestoreInput){
		"bad id":         func(in *workflows.RestoreInput) { in.CheckpointID = "../x" },
		"relative root":  func(in *workflows.RestoreInput) { in.Root = "x" },
		"empty url":      func(in *workflows.RestoreInput) { in.Participants = []string{""} },
		"bad restore id": func(in *workflows.RestoreInput) { in.RestoreID = "a/b" },
	} {
		t.Run(name, func(t *testing.T) {
			c := newCoord()
			in := restoreInput()
			mod(&in)
			_, err := runRestore(t, c, in)
			var ae *temporal.ApplicationError
			require.True(t, errors.As(err, &ae), "error %v", err)
			require.Equal(t, workflows.ErrInvalidCoordinatorInput, ae.Type())
			require.Empty(t, c.called())
		})
	}
}

// The coordinator activities cannot import this package; they mirror its
// names. They must agree.
func TestCoordinatorMirrorsRolloutNames(t *testing.T) {
	require.Equal(t, workflows.RolloutWorkflowName, activities.RolloutWorkflowType)
	require.Equal(t, workflows.RolloutWorkflowID(""), activities.RolloutIDPrefix)
	require.Equal(t, workflows.UpdatePark, activities.RolloutParkUpdate)
	require.Equal(t, workflows.UpdateResume, activities.RolloutResumeUpdate)
	require.Equal(t, workflows.SARolloutID, activities.SARolloutID)
	require.Equal(t, workflows.SARolloutSet, activities.SARolloutSet)
	require.Equal(t, workflows.SARolloutAttempt, activities.SARolloutAttempt)
	require.Equal(t, workflows.SARolloutTurn, activities.SARolloutTurn)
	require.Equal(t, workflows.SARolloutPhase, activities.SARolloutPhase)
	require.Equal(t, workflows.CheckpointWorkflowID("ck1"), "checkpoint/ck1")
	require.Equal(t, workflows.RestoreWorkflowID("ck1"), "restore/ck1")
}

// parkRecord is a record as a rollout returns it.
func parkRecord(t *testing.T, mode envs.Mode, completed bool) []byte {
	t.Helper()
	d := func(s string) transcript.Digest { return transcript.DigestOf([]byte(s)) }
	in := workflows.RolloutInput{
		RolloutID: "s1-0001", Set: "s1", Attempt: 2, Task: json.RawMessage(`{"target":3}`),
		Env: activities.EnvRef{Name: "counter"}, Policy: activities.PolicyRef{Model: "scripted-counter"}, Seed: 7,
		Limits: workflows.Limits{MaxTurns: 8}, RequireAck: true,
	}
	b := workflows.Boundary{
		RolloutID: "s1-0001", Attempt: 2, Turn: 3, Head: d("head"), Tools: d("tools"), Style: envs.StyleTools,
		EnvMode: mode, Revision: 5, Seeded: true, Cursor: 1, LastCall: "s1-0001/a2/t3",
		Pending: &activities.CallModelResult{CallID: "s1-0001/a2/t3", Head: d("pending"), ToolCalls: []transcript.ToolCall{
			{ID: "c0", Name: "increment", Arguments: `{"amount":1}`}, {ID: "c1", Name: "increment", Arguments: `{"amount":1}`},
		}},
	}
	rec := workflows.ParkRecord{CheckpointID: "ck1", Set: "s1", Input: in, Boundary: b, Phase: workflows.PhaseParked}
	if completed {
		b.Pending, b.Cursor, b.Done = nil, 0, true
		rec.Boundary, rec.Phase = b, workflows.PhaseAwaitingAck
		res := workflows.RolloutResult{RolloutID: "s1-0001", Set: "s1", Attempt: 2, Reward: 1, Turns: 3, Head: d("final")}
		receipt, err := workflows.NewReceipt(res)
		require.NoError(t, err)
		res.Receipt = &receipt
		rec.Result = &res
	}
	raw, err := json.Marshal(rec)
	require.NoError(t, err)
	return raw
}

// A record turned into the next attempt's input is a valid RolloutInput:
// the boundary carried whole (same pending answer and cursor, so the same
// request ids), restart-only continuations starting over, completed results
// offered again with their receipt.
func TestRestoredInputsAreRolloutInputs(t *testing.T) {
	tests := []struct {
		name      string
		mode      envs.Mode
		completed bool
		kind      string
	}{
		{"export_restore continues", envs.ModeExportRestore, false, activities.RestoreContinue},
		{"stateless continues", envs.ModeStateless, false, activities.RestoreContinue},
		{"restart_only starts over", envs.ModeRestartOnly, false, activities.RestoreStartOver},
		{"undeclared mode starts over", "", false, activities.RestoreStartOver},
		{"completed is offered again", envs.ModeRestartOnly, true, activities.RestoreOfferAgain},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := parkRecord(t, tc.mode, tc.completed)
			var rec workflows.ParkRecord
			require.NoError(t, json.Unmarshal(raw, &rec))

			out, kind, err := activities.BuildRestoredInput(raw, "ck1", 3)
			require.NoError(t, err)
			require.Equal(t, tc.kind, kind)
			var in workflows.RolloutInput
			dec := json.NewDecoder(bytes.NewReader(out))
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&in))

			want := rec.Input
			want.Attempt, want.HoldFor = 3, "ck1"
			switch tc.kind {
			case activities.RestoreContinue:
				want.Resume = &rec.Boundary
			case activities.RestoreOfferAgain:
				want.Resume, want.Completed = &rec.Boundary, rec.Result
			}
			require.Equal(t, want, in)

			again, _, err := activities.BuildRestoredInput(raw, "ck1", 3)
			require.NoError(t, err)
			require.Equal(t, out, again, "the same record gives the same bytes")
		})
	}
	_, _, err := activities.BuildRestoredInput(parkRecord(t, envs.ModeExportRestore, false), "ck1", 2)
	require.ErrorContains(t, err, "not above")
}

// A restored input held for the checkpoint runs as the Rollout workflow:
// parked until resumed, then it applies the pending call at the saved
// cursor with the saved request id, without a new model call or re-seed.
func TestRestoredInputResumesAtTheCursor(t *testing.T) {
	w := newWorld(2)
	env := newEnv(t, w)
	out, _, err := activities.BuildRestoredInput(parkRecord(t, envs.ModeExportRestore, false), "ck1", 3)
	require.NoError(t, err)
	var in workflows.RolloutInput
	require.NoError(t, json.Unmarshal(out, &in))
	in.RequireAck = false
	w.value, w.revision = 4, 5

	var seen []activities.OperateEnvironmentInput
	w.operateHook = func(op activities.OperateEnvironmentInput) { seen = append(seen, op) } // called under w.mu
	env.RegisterDelayedCallback(func() {
		w.mu.Lock()
		n := len(seen)
		w.mu.Unlock()
		require.Zero(t, n, "a held run does nothing before resume")
		env.UpdateWorkflow(workflows.UpdateResume, "r1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("resume rejected: %v", err) },
			OnAccept: func() {}, OnComplete: func(any, error) {},
		}, workflows.ResumeRequest{CheckpointID: "ck1"})
	}, time.Minute)
	env.ExecuteWorkflow(workflows.Rollout, in)
	res := result(t, env)
	require.Equal(t, 3, res.Attempt)
	require.NotEmpty(t, seen)
	require.Equal(t, 3, seen[0].Attempt)
	require.Equal(t, protocol.OperateRequestID("s1-0001", 3, 1), seen[0].RequestID, "the pending call at the cursor, with its saved request id")
	require.NotContains(t, w.applied, protocol.SeedRequestID("s1-0001"), "no re-seed")
	require.NotEmpty(t, w.calls)
	require.Equal(t, 4, w.calls[0].Turn, "no repeated model call: the next call is turn 4")
}
