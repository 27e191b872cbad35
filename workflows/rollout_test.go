package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/activities"
	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/protocol"
	"github.com/turnstile-rl/turnstile/transcript"
	"github.com/turnstile-rl/turnstile/workflows"
)

// world is a fake environment and policy behind the four activities: a
// counter that the policy increments to its target, one increment per turn.
type world struct {
	mu       sync.Mutex
	target   int
	value    int
	revision int64
	applied  map[string]int // request id → applications
	calls    []activities.CallModelInput
	style    envs.Style

	// Injected behaviour.
	modelErr    error                                       // returned by every model call
	operateErr  func(n int) error                           // error for the n-th operate call (1-based)
	refuse      func(req string) string                     // an environment refusal for a request id
	modelBlock  chan struct{}                               // when set, model calls wait for it to close or for cancellation
	operateHook func(in activities.OperateEnvironmentInput) // observes operate calls
	operates    int
}

func newWorld(target int) *world {
	return &world{target: target, applied: map[string]int{}, style: envs.StyleTools}
}

func (w *world) head(kind string, n int) transcript.Digest {
	return transcript.DigestOf([]byte(fmt.Sprintf("%s-%d", kind, n)))
}

func (w *world) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(w.start, activity.RegisterOptions{Name: activities.StartEnvironmentName})
	env.RegisterActivityWithOptions(w.model, activity.RegisterOptions{Name: activities.CallModelName})
	env.RegisterActivityWithOptions(w.operate, activity.RegisterOptions{Name: activities.OperateEnvironmentName})
	env.RegisterActivityWithOptions(w.verify, activity.RegisterOptions{Name: activities.VerifyName})
}

func (w *world) start(_ context.Context, in activities.StartEnvironmentInput) (activities.StartEnvironmentResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.applied[protocol.SeedRequestID(in.RolloutID)]++
	return activities.StartEnvironmentResult{Head: w.head("seed", 0), Tools: w.head("tools", 0), Style: w.style, Mode: envs.ModeExportRestore}, nil
}

func (w *world) model(ctx context.Context, in activities.CallModelInput) (activities.CallModelResult, error) {
	w.mu.Lock()
	w.calls = append(w.calls, in)
	err, block, value := w.modelErr, w.modelBlock, w.value
	w.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return activities.CallModelResult{}, ctx.Err()
		}
	}
	if err != nil {
		return activities.CallModelResult{}, err
	}
	res := activities.CallModelResult{
		CallID: activities.ModelCallID(in.RolloutID, in.Attempt, in.Turn), Parent: in.Parent,
		Head: w.head("model", in.Turn), Usage: activities.Usage{TotalTokens: 10, Calls: 1},
	}
	if value < w.target {
		res.ToolCalls = []transcript.ToolCall{{ID: fmt.Sprintf("c%d", in.Turn), Name: "increment", Arguments: `{"amount":1}`}}
	}
	return res, nil
}

func (w *world) operate(_ context.Context, in activities.OperateEnvironmentInput) (activities.OperateEnvironmentResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.operates++
	if w.operateHook != nil {
		w.operateHook(in)
	}
	if w.operateErr != nil {
		if err := w.operateErr(w.operates); err != nil {
			return activities.OperateEnvironmentResult{}, err
		}
	}
	if w.refuse != nil {
		if code := w.refuse(in.RequestID); code != "" {
			return activities.OperateEnvironmentResult{Head: w.head("refused", w.operates), Revision: in.ExpectedRevision, Refusal: code}, nil
		}
	}
	if in.ExpectedRevision != w.revision {
		return activities.OperateEnvironmentResult{}, temporal.NewNonRetryableApplicationError("revision mismatch", activities.ErrEnvironment, nil)
	}
	w.applied[in.RequestID]++
	w.value++
	w.revision++
	res := activities.OperateEnvironmentResult{Head: w.head("obs", int(w.revision)), Revision: w.revision}
	if w.style == envs.StyleGym {
		res.Reward = 0.25
		res.Terminated = w.value >= w.target
	}
	return res, nil
}

func (w *world) verify(_ context.Context, in activities.VerifyInput) (activities.VerifyResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	reward := 0.0
	if w.value == w.target {
		reward = 1
	}
	return activities.VerifyResult{Reward: reward}, nil
}

func input(maxTurns int) workflows.RolloutInput {
	return workflows.RolloutInput{
		RolloutID: "r1", Set: "s", Task: json.RawMessage(`{"target":3}`),
		Env: activities.EnvRef{Name: "counter"}, Policy: activities.PolicyRef{Model: "scripted-counter"},
		Seed: 7, Limits: workflows.Limits{MaxTurns: maxTurns},
	}
}

func newEnv(t *testing.T, w *world) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.Rollout, workflow.RegisterOptions{Name: workflows.RolloutWorkflowName})
	w.register(env)
	return env
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) workflows.RolloutResult {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res workflows.RolloutResult
	require.NoError(t, env.GetWorkflowResult(&res))
	return res
}

func TestRolloutNormalRun(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, 4, res.Turns, "three increments and a final answer")
	require.Equal(t, int64(4), res.Usage.Calls)
	require.Len(t, res.Lineage, 4)
	require.Empty(t, res.Lineage[0].Parent)
	for i := 1; i < len(res.Lineage); i++ {
		require.Equal(t, res.Lineage[i-1].CallID, res.Lineage[i].Parent, "each call's parent is the previous call")
	}
	require.NotNil(t, res.Receipt)
	want, err := workflows.NewReceipt(res)
	require.NoError(t, err)
	require.Equal(t, want, *res.Receipt)
	for id, n := range w.applied {
		require.Equal(t, 1, n, "request %s applied once", id)
	}
	require.Contains(t, w.applied, protocol.OperateRequestID("r1", 3, 0))
}

func TestRolloutTurnLimit(t *testing.T) {
	w := newWorld(10)
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(4))
	res := result(t, env)

	require.Equal(t, 4, res.Turns)
	require.True(t, res.Truncated)
	require.Equal(t, 0.0, res.Reward)
	require.Len(t, w.calls, 4, "no model call past the limit")
}

func TestRolloutModelErrorFails(t *testing.T) {
	w := newWorld(3)
	w.modelErr = temporal.NewNonRetryableApplicationError("model answered 400: bad tool schema", activities.ErrModelRequest, nil)
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(16))

	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	require.Error(t, err)
	require.Contains(t, err.Error(), "bad tool schema")
	require.Len(t, w.calls, 1, "a non-retryable model error is not retried")
}

func TestRolloutStaleAttemptIsFenced(t *testing.T) {
	w := newWorld(3)
	w.operateErr = func(n int) error {
		if n == 2 {
			return temporal.NewNonRetryableApplicationError("attempt 0 < 1", activities.ErrStaleAttempt, nil)
		}
		return nil
	}
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(16))

	err := env.GetWorkflowError()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, workflows.ErrFenced, ae.Type())
	require.Equal(t, 1, w.value, "nothing applied after the refusal")
}

func TestRolloutEnvironmentRefusalIsShownToModel(t *testing.T) {
	w := newWorld(2)
	w.refuse = func(req string) string {
		if req == protocol.OperateRequestID("r1", 1, 0) {
			return "bad_arguments: amount must be 1..10"
		}
		return ""
	}
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, 4, res.Turns, "the refused turn is followed by two increments and the answer")
	require.Equal(t, 0, w.applied[protocol.OperateRequestID("r1", 1, 0)])
}

func TestRolloutInvalidInput(t *testing.T) {
	tests := map[string]func(*workflows.RolloutInput){
		"no rollout id":  func(in *workflows.RolloutInput) { in.RolloutID = "" },
		"no env":         func(in *workflows.RolloutInput) { in.Env.Name = "" },
		"no model":       func(in *workflows.RolloutInput) { in.Policy.Model = "" },
		"negative turns": func(in *workflows.RolloutInput) { in.Limits.MaxTurns = -1 },
		"foreign resume": func(in *workflows.RolloutInput) { in.Resume = &workflows.Boundary{RolloutID: "other", Seeded: true} },
		"future boundary": func(in *workflows.RolloutInput) {
			in.Resume = &workflows.Boundary{RolloutID: "r1", Attempt: 5, Seeded: true}
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(3)
			env := newEnv(t, w)
			in := input(16)
			mutate(&in)
			env.ExecuteWorkflow(workflows.Rollout, in)
			err := env.GetWorkflowError()
			require.Error(t, err)
			var ae *temporal.ApplicationError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, workflows.ErrInvalidInput, ae.Type())
			require.Empty(t, w.applied, "bad input changes nothing")
		})
	}
}

func TestRolloutGymStyleAccumulatesReward(t *testing.T) {
	w := newWorld(4)
	w.style = envs.StyleGym
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	res := result(t, env)

	require.True(t, res.Terminated)
	require.Equal(t, 1.0, res.Reward, "four dense rewards of 0.25")
	require.Equal(t, 4, res.Turns)
}

func TestRolloutGymStepLimitTruncatesWithoutExtraAction(t *testing.T) {
	w := newWorld(10)
	w.style = envs.StyleGym
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(3))
	res := result(t, env)

	require.True(t, res.Truncated)
	require.False(t, res.Terminated)
	require.Len(t, w.calls, 3)
	require.InDelta(t, 0.75, res.Reward, 1e-9)
}

func TestRolloutParkedEnvironmentRetriesSameRequest(t *testing.T) {
	w := newWorld(2)
	var seen []string
	w.operateHook = func(in activities.OperateEnvironmentInput) { seen = append(seen, in.RequestID) }
	w.operateErr = func(n int) error {
		if n <= 2 {
			return temporal.NewNonRetryableApplicationError("admission closed", activities.ErrParked, nil)
		}
		return nil
	}
	env := newEnv(t, w)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	first := protocol.OperateRequestID("r1", 1, 0)
	require.Equal(t, []string{first, first, first, protocol.OperateRequestID("r1", 2, 0)}, seen)
	require.Equal(t, 3, res.Turns)
}

func TestRolloutParkAndResume(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	var rec workflows.ParkRecord
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdatePark, "park-1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("park rejected: %v", err) },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				rec = v.(workflows.ParkRecord)
				// While parked nothing moves.
				require.Equal(t, workflows.PhaseParked, rec.Phase)
				// A second checkpoint is refused while the first holds.
				env.UpdateWorkflow(workflows.UpdatePark, "park-2", &testsuite.TestUpdateCallback{
					OnAccept:   func() { t.Error("a conflicting checkpoint was accepted") },
					OnReject:   func(err error) { require.Contains(t, err.Error(), "cp-1") },
					OnComplete: func(any, error) {},
				}, workflows.ParkRequest{CheckpointID: "cp-2"})
				env.UpdateWorkflow(workflows.UpdateResume, "resume-1", &testsuite.TestUpdateCallback{
					OnReject: func(err error) { t.Errorf("resume rejected: %v", err) }, OnAccept: func() {}, OnComplete: func(any, error) {},
				}, workflows.ResumeRequest{CheckpointID: "cp-1"})
			},
			OnAccept: func() {},
		}, workflows.ParkRequest{CheckpointID: "cp-1", Deadline: time.Now().Add(time.Hour)})
	}, 1*time.Millisecond)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, "cp-1", rec.CheckpointID)
	require.True(t, rec.Boundary.Seeded)
	require.Equal(t, "r1", rec.Input.RolloutID)
	require.Nil(t, rec.Input.Resume)
}

func TestRolloutParkDeadlineCancelsSlowModel(t *testing.T) {
	w := newWorld(2)
	w.modelBlock = make(chan struct{}) // the first model call never answers by itself
	env := newEnv(t, w)
	env.SetTestTimeout(30 * time.Second)
	var rec workflows.ParkRecord
	parked := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdatePark, "park-1", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { t.Errorf("park rejected: %v", err) },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				rec, parked = v.(workflows.ParkRecord), true
				w.mu.Lock()
				w.modelBlock = nil
				w.mu.Unlock()
				env.UpdateWorkflow(workflows.UpdateResume, "resume-1", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { t.Error(err) }, OnComplete: func(any, error) {},
				}, workflows.ResumeRequest{CheckpointID: "cp-1"})
			},
		}, workflows.ParkRequest{CheckpointID: "cp-1", Deadline: env.Now().Add(200 * time.Millisecond)})
	}, 10*time.Millisecond)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	res := result(t, env)

	require.True(t, parked)
	require.Equal(t, 0, rec.Boundary.Turn, "parked at the boundary before the cancelled call")
	require.Nil(t, rec.Boundary.Pending)
	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, 3, res.Turns)
	// The cancelled turn-1 call was made again under the same id.
	require.Equal(t, 1, w.calls[0].Turn)
	require.Equal(t, 1, w.calls[1].Turn)
	require.Len(t, res.Lineage, 3)
}

func TestRolloutResumeFromPendingBoundaryReusesRequestID(t *testing.T) {
	w := newWorld(2)
	w.value, w.revision = 1, 1
	var seen []activities.OperateEnvironmentInput
	w.operateHook = func(in activities.OperateEnvironmentInput) { seen = append(seen, in) }
	env := newEnv(t, w)
	in := input(16)
	in.Attempt = 1
	pending := activities.CallModelResult{
		CallID: activities.ModelCallID("r1", 0, 2), Parent: activities.ModelCallID("r1", 0, 1),
		ToolCalls: []transcript.ToolCall{{ID: "c2", Name: "increment", Arguments: `{"amount":1}`}},
	}
	in.Resume = &workflows.Boundary{
		RolloutID: "r1", Attempt: 0, Turn: 2, Seeded: true, Revision: 1, Style: envs.StyleTools,
		Pending: &pending, LastCall: pending.CallID,
		Lineage: []workflows.LineageEntry{{CallID: pending.Parent}, {CallID: pending.CallID, Parent: pending.Parent}},
	}
	env.ExecuteWorkflow(workflows.Rollout, in)
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, protocol.OperateRequestID("r1", 2, 0), seen[0].RequestID, "the pending call keeps its request id")
	require.Equal(t, 1, seen[0].Attempt)
	require.Len(t, w.calls, 1, "no model call is repeated; only the final answer is asked for")
	require.Equal(t, pending.CallID, w.calls[0].Parent, "the first call of the new attempt links to the saved parent")
	require.Len(t, res.Lineage, 3)
	require.Equal(t, 0, w.applied[protocol.SeedRequestID("r1")], "a resumed rollout is not re-seeded")
}

func TestRolloutHoldsResultUntilAcknowledged(t *testing.T) {
	w := newWorld(1)
	env := newEnv(t, w)
	in := input(16)
	in.RequireAck = true
	var status workflows.Status
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(workflows.QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&status))
		require.Equal(t, workflows.PhaseAwaitingAck, status.Phase)
		require.NotNil(t, status.Result)
		bad := *status.Result.Receipt
		bad.SHA256 = "00"
		env.UpdateWorkflow(workflows.UpdateAcknowledge, "ack-bad", &testsuite.TestUpdateCallback{
			OnAccept: func() { t.Error("a wrong receipt was accepted") }, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, workflows.AckRequest{Receipt: bad})
		env.UpdateWorkflow(workflows.UpdateAcknowledge, "ack", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Error(err) }, OnComplete: func(any, error) {},
		}, workflows.AckRequest{Receipt: *status.Result.Receipt})
	}, time.Hour)
	env.ExecuteWorkflow(workflows.Rollout, in)
	res := result(t, env)
	require.Equal(t, *status.Result.Receipt, *res.Receipt)
}

func TestRolloutContinuesAsNewAtBoundary(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	env.SetContinueAsNewSuggested(true)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	require.Equal(t, workflows.RolloutWorkflowName, can.WorkflowType.Name)
}

func TestRolloutOffersCompletedResultAgain(t *testing.T) {
	w := newWorld(1)
	env := newEnv(t, w)
	done := workflows.RolloutResult{RolloutID: "r1", Set: "s", Attempt: 0, Reward: 1, Turns: 2}
	receipt, err := workflows.NewReceipt(done)
	require.NoError(t, err)
	done.Receipt = &receipt
	in := input(16)
	in.Attempt = 1
	in.Completed = &done
	env.ExecuteWorkflow(workflows.Rollout, in)
	res := result(t, env)
	require.Equal(t, receipt, *res.Receipt, "the same receipt is offered")
	require.Empty(t, w.applied, "nothing runs again")
	require.Empty(t, w.calls)

	// A tampered result is refused before anything runs.
	env = newEnv(t, w)
	bad := done
	bad.Reward = 0
	in.Completed = &bad
	env.ExecuteWorkflow(workflows.Rollout, in)
	require.Error(t, env.GetWorkflowError())
}

func TestRolloutParkEndsWhenCheckpointAbortsBeforeBoundary(t *testing.T) {
	w := newWorld(1)
	w.modelBlock = make(chan struct{}) // the model is still answering when the abort comes
	env := newEnv(t, w)
	env.SetTestTimeout(30 * time.Second)
	var parkErr error
	parkDone := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(workflows.UpdatePark, "park-1", &testsuite.TestUpdateCallback{
			OnAccept:   func() {},
			OnReject:   func(err error) { t.Errorf("park rejected: %v", err) },
			OnComplete: func(_ any, err error) { parkErr, parkDone = err, true },
		}, workflows.ParkRequest{CheckpointID: "cp-1", Deadline: env.Now().Add(time.Hour)})
		env.UpdateWorkflow(workflows.UpdateResume, "resume-1", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { t.Error(err) },
			OnComplete: func(any, error) {
				w.mu.Lock()
				close(w.modelBlock)
				w.modelBlock = nil
				w.mu.Unlock()
			},
		}, workflows.ResumeRequest{CheckpointID: "cp-1"})
	}, 10*time.Millisecond)
	env.ExecuteWorkflow(workflows.Rollout, input(16))
	res := result(t, env)

	require.True(t, parkDone, "the park update returned instead of dangling")
	var ae *temporal.ApplicationError
	require.ErrorAs(t, parkErr, &ae)
	require.Equal(t, workflows.ErrNotParked, ae.Type())
	require.Equal(t, 1.0, res.Reward, "the rollout went on after the abort")
}
