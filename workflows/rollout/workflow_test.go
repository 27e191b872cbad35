package rollout_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/transcript"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// world is a fake environment and policy behind the four activities: a
// counter that the policy increments to its target, one increment per turn.
type world struct {
	mu       sync.Mutex
	target   int
	value    int
	revision int64
	applied  map[string]int // request id → applications
	calls    []rollout.CallModelInput
	style    envs.Style

	// Injected behaviour.
	modelErr   error                   // returned by every model call
	operateErr func(n int) error       // error for the n-th operate call (1-based)
	refuse     func(req string) string // an environment refusal for a request id
	modelBlock chan struct{}           // when set, model calls wait for it to close or for cancellation
	// modelCut answers a model call cancelled while blocked (default: the
	// context's error).
	modelCut    func(in rollout.CallModelInput) (rollout.CallModelResult, error)
	operateHook func(in rollout.OperateEnvironmentInput) // observes operate calls
	generation  func(turn int) *rollout.GenerationRef    // the generation a model call reports
	verifyErr   func(in rollout.VerifyInput) error       // error of a verify call
	operates    int
	// fence answers the set fence checks a seed makes (nil: not fenced);
	// fenceChecks records them.
	fence       func(in rollout.SetFenceCheck) *rollout.FenceWindow
	fenceChecks []rollout.SetFenceCheck
	verifies    []rollout.VerifyInput
	starts      []rollout.StartEnvironmentInput
}

func newWorld(target int) *world {
	return &world{target: target, applied: map[string]int{}, style: envs.StyleTools}
}

func (w *world) head(kind string, n int) transcript.Digest {
	return transcript.DigestOf([]byte(fmt.Sprintf("%s-%d", kind, n)))
}

func (w *world) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(w.start, activity.RegisterOptions{Name: rollout.StartEnvironmentName})
	env.RegisterActivityWithOptions(w.model, activity.RegisterOptions{Name: rollout.CallModelName})
	env.RegisterActivityWithOptions(w.operate, activity.RegisterOptions{Name: rollout.OperateEnvironmentName})
	env.RegisterActivityWithOptions(w.verify, activity.RegisterOptions{Name: rollout.VerifyName})
}

// start seeds the session, after the fence check StartEnvironment makes
// (as the worker's, before anything is sent).
func (w *world) start(_ context.Context, in rollout.StartEnvironmentInput) (rollout.StartEnvironmentResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := in.Fence; f != nil {
		w.fenceChecks = append(w.fenceChecks, *f)
		if w.fence != nil {
			if win := w.fence(*f); win != nil {
				return rollout.StartEnvironmentResult{}, rollout.FencedByRestoreError(in.RolloutID, in.Attempt, f.Set, f.StartedAt, *win)
			}
		}
	}
	w.applied[protocol.SeedRequestID(in.RolloutID)]++
	w.starts = append(w.starts, in)
	return rollout.StartEnvironmentResult{Head: w.head("seed", 0), Tools: w.head("tools", 0), Style: w.style, Mode: envs.ModeExportRestore}, nil
}

func (w *world) model(ctx context.Context, in rollout.CallModelInput) (rollout.CallModelResult, error) {
	w.mu.Lock()
	w.calls = append(w.calls, in)
	err, block, value, gen, cut := w.modelErr, w.modelBlock, w.value, w.generation, w.modelCut
	w.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			if cut != nil {
				return cut(in)
			}
			return rollout.CallModelResult{}, ctx.Err()
		}
	}
	if err != nil {
		return rollout.CallModelResult{}, err
	}
	res := rollout.CallModelResult{PendingCall: rollout.PendingCall{
		CallID: rollout.ModelCallID(in.RolloutID, in.Attempt, in.Turn), Parent: in.Parent,
		Head: w.head("model", in.Turn), Usage: rollout.Usage{TotalTokens: 10, Calls: 1},
	}}
	if gen != nil {
		res.Generation = gen(in.Turn)
	}
	if value < w.target {
		res.ToolCalls = []transcript.ToolCall{{ID: fmt.Sprintf("c%d", in.Turn), Name: "increment", Arguments: `{"amount":1}`}}
	}
	return res, nil
}

// closedFor makes the first ops operations find admission closed (the
// server is parked), so the rollout waits on a timer mid-episode.
func closedFor(ops int) func(n int) error {
	return func(n int) error {
		if n <= ops {
			return temporal.NewNonRetryableApplicationError("admission closed", rollout.ErrParked, nil)
		}
		return nil
	}
}

func (w *world) operate(_ context.Context, in rollout.OperateEnvironmentInput) (rollout.OperateEnvironmentResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.operates++
	if w.operateHook != nil {
		w.operateHook(in)
	}
	if w.operateErr != nil {
		if err := w.operateErr(w.operates); err != nil {
			return rollout.OperateEnvironmentResult{}, err
		}
	}
	if w.refuse != nil {
		if code := w.refuse(in.RequestID); code != "" {
			return rollout.OperateEnvironmentResult{Head: w.head("refused", w.operates), Revision: in.ExpectedRevision, Refusal: code}, nil
		}
	}
	if in.ExpectedRevision != w.revision {
		return rollout.OperateEnvironmentResult{}, temporal.NewNonRetryableApplicationError("revision mismatch", rollout.ErrEnvironment, nil)
	}
	w.applied[in.RequestID]++
	w.value++
	w.revision++
	res := rollout.OperateEnvironmentResult{Head: w.head("obs", int(w.revision)), Revision: w.revision}
	if w.style == envs.StyleGym {
		res.Reward = 0.25
		res.Terminated = w.value >= w.target
	}
	return res, nil
}

func (w *world) verify(_ context.Context, in rollout.VerifyInput) (rollout.VerifyResult, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.verifies = append(w.verifies, in)
	if w.verifyErr != nil {
		if err := w.verifyErr(in); err != nil {
			return rollout.VerifyResult{}, err
		}
	}
	reward := 0.0
	if w.value == w.target {
		reward = 1
	}
	if in.StoreDetails {
		return rollout.VerifyResult{Reward: reward, DetailsRef: w.head("details", w.value)}, nil
	}
	return rollout.VerifyResult{Reward: reward}, nil
}

func input(maxTurns int) rollout.Input {
	return rollout.Input{
		RolloutID: "r1", Set: "s", Task: json.RawMessage(`{"target":3}`),
		Env: rollout.EnvRef{Name: "counter"}, Policy: rollout.PolicyRef{Model: "scripted-counter"},
		Seed: 7, Limits: rollout.Limits{MaxTurns: maxTurns},
	}
}

func newEnv(t *testing.T, w *world) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env := testsupport.NewWorkflowEnv()
	env.RegisterWorkflowWithOptions(rollout.Rollout, workflow.RegisterOptions{Name: rollout.WorkflowName})
	w.register(env)
	return env
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) rollout.Result {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res rollout.Result
	require.NoError(t, env.GetWorkflowResult(&res))
	return res
}

func TestRolloutNormalRun(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
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
	want, err := rollout.NewReceipt(res)
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
	env.ExecuteWorkflow(rollout.Rollout, input(4))
	res := result(t, env)

	require.Equal(t, 4, res.Turns)
	require.True(t, res.Truncated)
	require.Equal(t, 0.0, res.Reward)
	require.Len(t, w.calls, 4, "no model call past the limit")
}

func TestRolloutModelErrorFails(t *testing.T) {
	w := newWorld(3)
	w.modelErr = temporal.NewNonRetryableApplicationError("model answered 400: bad tool schema", rollout.ErrModelRequest, nil)
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(16))

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
			return temporal.NewNonRetryableApplicationError("attempt 0 < 1", rollout.ErrStaleAttempt, nil)
		}
		return nil
	}
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(16))

	err := env.GetWorkflowError()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, rollout.ErrFenced, ae.Type())
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
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, 4, res.Turns, "the refused turn is followed by two increments and the answer")
	require.Equal(t, 0, w.applied[protocol.OperateRequestID("r1", 1, 0)])
}

func TestRolloutInvalidInput(t *testing.T) {
	tests := map[string]func(*rollout.Input){
		"no rollout id":  func(in *rollout.Input) { in.RolloutID = "" },
		"no env":         func(in *rollout.Input) { in.Env.Name = "" },
		"no model":       func(in *rollout.Input) { in.Policy.Model = "" },
		"negative turns": func(in *rollout.Input) { in.Limits.MaxTurns = -1 },
		"bad sampling":   func(in *rollout.Input) { in.Sampling = &rollout.Sampling{MaxTokens: new(int64)} },
		"foreign resume": func(in *rollout.Input) { in.Resume = &rollout.Boundary{RolloutID: "other", Seeded: true} },
		"future boundary": func(in *rollout.Input) {
			in.Resume = &rollout.Boundary{RolloutID: "r1", Attempt: 5, Seeded: true}
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			w := newWorld(3)
			env := newEnv(t, w)
			in := input(16)
			mutate(&in)
			env.ExecuteWorkflow(rollout.Rollout, in)
			err := env.GetWorkflowError()
			require.Error(t, err)
			var ae *temporal.ApplicationError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, rollout.ErrInvalidInput, ae.Type())
			require.Empty(t, w.applied, "bad input changes nothing")
		})
	}
}

func TestRolloutGymStyleAccumulatesReward(t *testing.T) {
	w := newWorld(4)
	w.style = envs.StyleGym
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)

	require.True(t, res.Terminated)
	require.Equal(t, 1.0, res.Reward, "four dense rewards of 0.25")
	require.Equal(t, 4, res.Turns)
}

func TestRolloutGymStepLimitTruncatesWithoutExtraAction(t *testing.T) {
	w := newWorld(10)
	w.style = envs.StyleGym
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(3))
	res := result(t, env)

	require.True(t, res.Truncated)
	require.False(t, res.Terminated)
	require.Len(t, w.calls, 3)
	require.InDelta(t, 0.75, res.Reward, 1e-9)
}

func TestRolloutParkedEnvironmentRetriesSameRequest(t *testing.T) {
	w := newWorld(2)
	var seen []string
	w.operateHook = func(in rollout.OperateEnvironmentInput) { seen = append(seen, in.RequestID) }
	w.operateErr = closedFor(2)
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	first := protocol.OperateRequestID("r1", 1, 0)
	require.Equal(t, []string{first, first, first, protocol.OperateRequestID("r1", 2, 0)}, seen)
	require.Equal(t, 3, res.Turns)
}

func TestRolloutParkAndResume(t *testing.T) {
	w := newWorld(3)
	// The first operation finds admission closed, so the rollout waits on a
	// timer mid-episode: the test clock moves only then, and the park
	// request below arrives before the episode ends, on any machine.
	w.operateErr = closedFor(1)
	env := newEnv(t, w)
	var rec rollout.ParkRecord
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(rollout.UpdatePark, "park-1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { assert.NoError(t, err, "park rejected") },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				rec = v.(rollout.ParkRecord)
				// While parked nothing moves.
				require.Equal(t, rollout.PhaseParked, rec.Phase)
				// A second checkpoint is refused while the first holds.
				env.UpdateWorkflow(rollout.UpdatePark, "park-2", &testsuite.TestUpdateCallback{
					OnAccept:   func() { assert.Fail(t, "a conflicting checkpoint was accepted") },
					OnReject:   func(err error) { require.Contains(t, err.Error(), "cp-1") },
					OnComplete: func(any, error) {},
				}, rollout.ParkRequest{CheckpointID: "cp-2"})
				env.UpdateWorkflow(rollout.UpdateResume, "resume-1", &testsuite.TestUpdateCallback{
					OnReject: func(err error) { assert.NoError(t, err, "resume rejected") }, OnAccept: func() {}, OnComplete: func(any, error) {},
				}, rollout.ResumeRequest{CheckpointID: "cp-1"})
			},
			OnAccept: func() {},
		}, rollout.ParkRequest{CheckpointID: "cp-1", Deadline: time.Now().Add(time.Hour)})
	}, 1*time.Millisecond)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
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
	var rec rollout.ParkRecord
	parked := false
	// The park must meet the first model call in flight. Under load the
	// call may not have started 10 ms (mock time) in, so look again until
	// it has.
	var park func()
	park = func() {
		w.mu.Lock()
		inFlight := len(w.calls) > 0
		w.mu.Unlock()
		if !inFlight {
			env.RegisterDelayedCallback(park, 10*time.Millisecond)
			return
		}
		env.UpdateWorkflow(rollout.UpdatePark, "park-1", &testsuite.TestUpdateCallback{
			OnAccept: func() {},
			OnReject: func(err error) { assert.NoError(t, err, "park rejected") },
			OnComplete: func(v any, err error) {
				require.NoError(t, err)
				rec, parked = v.(rollout.ParkRecord), true
				w.mu.Lock()
				w.modelBlock = nil
				w.mu.Unlock()
				env.UpdateWorkflow(rollout.UpdateResume, "resume-1", &testsuite.TestUpdateCallback{
					OnAccept: func() {}, OnReject: func(err error) { assert.NoError(t, err) }, OnComplete: func(any, error) {},
				}, rollout.ResumeRequest{CheckpointID: "cp-1"})
			},
		}, rollout.ParkRequest{CheckpointID: "cp-1", Deadline: env.Now().Add(200 * time.Millisecond)})
	}
	env.RegisterDelayedCallback(park, 10*time.Millisecond)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
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
	var seen []rollout.OperateEnvironmentInput
	w.operateHook = func(in rollout.OperateEnvironmentInput) { seen = append(seen, in) }
	env := newEnv(t, w)
	in := input(16)
	in.Attempt = 1
	pending := rollout.PendingCall{
		CallID: rollout.ModelCallID("r1", 0, 2), Parent: rollout.ModelCallID("r1", 0, 1),
		ToolCalls: []transcript.ToolCall{{ID: "c2", Name: "increment", Arguments: `{"amount":1}`}},
	}
	in.Resume = &rollout.Boundary{
		RolloutID: "r1", Attempt: 0, Turn: 2, Seeded: true, Revision: 1, Style: envs.StyleTools,
		Pending: &pending, LastCall: pending.CallID,
		Lineage: []rollout.LineageEntry{{CallID: pending.Parent}, {CallID: pending.CallID, Parent: pending.Parent}},
	}
	env.ExecuteWorkflow(rollout.Rollout, in)
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
	var status rollout.Status
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(rollout.QueryStatus)
		require.NoError(t, err)
		require.NoError(t, v.Get(&status))
		require.Equal(t, rollout.PhaseAwaitingAck, status.Phase)
		require.NotNil(t, status.Result)
		bad := *status.Result.Receipt
		bad.SHA256 = "00"
		env.UpdateWorkflow(rollout.UpdateAcknowledge, "ack-bad", &testsuite.TestUpdateCallback{
			OnAccept: func() { assert.Fail(t, "a wrong receipt was accepted") }, OnReject: func(error) {}, OnComplete: func(any, error) {},
		}, rollout.AckRequest{Receipt: bad})
		env.UpdateWorkflow(rollout.UpdateAcknowledge, "ack", &testsuite.TestUpdateCallback{
			OnAccept: func() {}, OnReject: func(err error) { assert.NoError(t, err) }, OnComplete: func(any, error) {},
		}, rollout.AckRequest{Receipt: *status.Result.Receipt})
	}, time.Hour)
	env.ExecuteWorkflow(rollout.Rollout, in)
	res := result(t, env)
	require.Equal(t, *status.Result.Receipt, *res.Receipt)
}

func TestRolloutContinuesAsNewAtBoundary(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	env.SetContinueAsNewSuggested(true)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	require.True(t, env.IsWorkflowCompleted())
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, err, &can)
	require.Equal(t, rollout.WorkflowName, can.WorkflowType.Name)
}

func TestRolloutOffersCompletedResultAgain(t *testing.T) {
	w := newWorld(1)
	env := newEnv(t, w)
	done := rollout.Result{RolloutID: "r1", Set: "s", Attempt: 0, Reward: 1, Turns: 2}
	receipt, err := rollout.NewReceipt(done)
	require.NoError(t, err)
	done.Receipt = &receipt
	in := input(16)
	in.Attempt = 1
	in.Completed = &done
	env.ExecuteWorkflow(rollout.Rollout, in)
	res := result(t, env)
	require.Equal(t, receipt, *res.Receipt, "the same receipt is offered")
	require.Empty(t, w.applied, "nothing runs again")
	require.Empty(t, w.calls)

	// A tampered result is refused before anything runs.
	env = newEnv(t, w)
	bad := done
	bad.Reward = 0
	in.Completed = &bad
	env.ExecuteWorkflow(rollout.Rollout, in)
	require.Error(t, env.GetWorkflowError())
}

// A checkpoint that aborts before the rollout reached its boundary
// releases it by a resume update or, as a retried step does, a resume
// signal; either ends the pending park update with NotParked (it returns
// instead of dangling), and the rollout goes on.
func TestRolloutPendingParkEndsWhenCheckpointAborts(t *testing.T) {
	// unblock lets the model answer: it was still answering when the abort
	// came.
	unblock := func(w *world) {
		w.mu.Lock()
		close(w.modelBlock)
		w.modelBlock = nil
		w.mu.Unlock()
	}
	for _, tc := range []struct {
		name   string
		resume func(t *testing.T, env *testsuite.TestWorkflowEnvironment, w *world)
	}{
		{"resume update", func(t *testing.T, env *testsuite.TestWorkflowEnvironment, w *world) {
			env.UpdateWorkflow(rollout.UpdateResume, "resume-1", &testsuite.TestUpdateCallback{
				OnAccept: func() {}, OnReject: func(err error) { assert.NoError(t, err) },
				OnComplete: func(any, error) { unblock(w) },
			}, rollout.ResumeRequest{CheckpointID: "cp-1"})
		}},
		{"resume signal", func(_ *testing.T, env *testsuite.TestWorkflowEnvironment, w *world) {
			env.SignalWorkflow(rollout.SignalResume, rollout.ResumeRequest{CheckpointID: "cp-1"})
			env.RegisterDelayedCallback(func() { unblock(w) }, time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(1)
			w.modelBlock = make(chan struct{})
			env := newEnv(t, w)
			env.SetTestTimeout(30 * time.Second)
			var parkErr error
			parkDone := false
			env.RegisterDelayedCallback(func() {
				env.UpdateWorkflow(rollout.UpdatePark, "park-1", &testsuite.TestUpdateCallback{
					OnAccept:   func() {},
					OnReject:   func(err error) { assert.NoError(t, err, "park rejected") },
					OnComplete: func(_ any, err error) { parkErr, parkDone = err, true },
				}, rollout.ParkRequest{CheckpointID: "cp-1", Deadline: env.Now().Add(time.Hour)})
				tc.resume(t, env, w)
			}, 10*time.Millisecond)
			env.ExecuteWorkflow(rollout.Rollout, input(16))
			res := result(t, env)

			require.True(t, parkDone, "the park update returned instead of dangling")
			var ae *temporal.ApplicationError
			require.ErrorAs(t, parkErr, &ae)
			require.Equal(t, rollout.ErrNotParked, ae.Type())
			require.Equal(t, 1.0, res.Reward, "the rollout went on after the abort")
		})
	}
}

// A parked rollout is searchable by the checkpoint it is held for
// (CheckpointId), and stops being so once resumed.
func TestRolloutParkedCarriesCheckpointID(t *testing.T) {
	w := newWorld(3)
	w.operateErr = closedFor(1) // wait on a timer mid-episode, as above
	env := newEnv(t, w)
	var upserts []temporal.SearchAttributes
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		upserts = append(upserts, args.Get(0).(temporal.SearchAttributes))
	}).Return(nil)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(rollout.UpdatePark, "park-1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { assert.NoError(t, err, "park rejected") }, OnAccept: func() {},
			OnComplete: func(any, error) {
				env.UpdateWorkflow(rollout.UpdateResume, "resume-1", &testsuite.TestUpdateCallback{
					OnReject: func(err error) { assert.NoError(t, err, "resume rejected") }, OnAccept: func() {}, OnComplete: func(any, error) {},
				}, rollout.ResumeRequest{CheckpointID: "cp-7"})
			},
		}, rollout.ParkRequest{CheckpointID: "cp-7", Deadline: time.Now().Add(time.Hour)})
	}, time.Millisecond)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	result(t, env)

	key := temporal.NewSearchAttributeKeyKeyword(rollout.SACheckpointID)
	phase := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutPhase)
	parked := -1
	for i, sa := range upserts {
		if p, _ := sa.GetKeyword(phase); p == string(rollout.PhaseParked) {
			parked = i
			id, ok := sa.GetKeyword(key)
			require.True(t, ok, "the parked upsert sets CheckpointId")
			require.Equal(t, "cp-7", id)
		}
	}
	require.GreaterOrEqual(t, parked, 0, "the rollout parked")
	require.Greater(t, len(upserts), parked+1, "it moved on after the resume")
	for _, sa := range upserts[parked+1:] {
		require.False(t, sa.ContainsKey(key), "no upsert after the resume names the checkpoint")
	}
}

// The signal forms of park and resume do what the updates do: the park
// record is read by query once the rollout is parked, a park for a second
// checkpoint is ignored (the query names the holder), a resume naming
// another checkpoint releases nothing, and the right one releases it.
func TestRolloutParkAndResumeBySignal(t *testing.T) {
	w := newWorld(3)
	w.operateErr = closedFor(1) // wait on a timer mid-episode, as above
	env := newEnv(t, w)
	var rec rollout.ParkRecord
	var notYet, other error
	env.RegisterDelayedCallback(func() {
		_, notYet = env.QueryWorkflow(rollout.QueryParkRecord, "cp-1")
		env.SignalWorkflow(rollout.SignalPark, rollout.ParkRequest{CheckpointID: "cp-1", Deadline: time.Now().Add(time.Hour)})
	}, time.Millisecond)
	var collect func()
	collect = func() {
		v, err := env.QueryWorkflow(rollout.QueryParkRecord, "cp-1")
		if err != nil {
			env.RegisterDelayedCallback(collect, 10*time.Millisecond)
			return
		}
		require.NoError(t, v.Get(&rec))
		env.SignalWorkflow(rollout.SignalPark, rollout.ParkRequest{CheckpointID: "cp-2"})
		env.SignalWorkflow(rollout.SignalResume, rollout.ResumeRequest{CheckpointID: "cp-2"})
		env.RegisterDelayedCallback(func() {
			_, other = env.QueryWorkflow(rollout.QueryParkRecord, "cp-2")
			v, err := env.QueryWorkflow(rollout.QueryParkRecord, "cp-1")
			require.NoError(t, err, "still parked for cp-1 after the wrong resume")
			var again rollout.ParkRecord
			require.NoError(t, v.Get(&again))
			require.Equal(t, rec.Boundary, again.Boundary, "nothing moved while parked")
			env.SignalWorkflow(rollout.SignalResume, rollout.ResumeRequest{CheckpointID: "cp-1"})
		}, time.Second)
	}
	env.RegisterDelayedCallback(collect, 2*time.Millisecond)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, "cp-1", rec.CheckpointID)
	require.Equal(t, rollout.PhaseParked, rec.Phase)
	require.True(t, rec.Boundary.Seeded)
	require.Nil(t, rec.Input.Resume)
	require.ErrorContains(t, notYet, rollout.NotParkedYet)
	require.ErrorContains(t, other, rollout.HeldForOther)
	require.ErrorContains(t, other, "cp-1")
}

// A park signal that arrives after its checkpoint released the rollout (a
// retried park step's late signal) or long past its deadline parks nothing.
func TestRolloutIgnoresLateParkSignals(t *testing.T) {
	for _, tc := range []struct {
		name string
		send func(env *testsuite.TestWorkflowEnvironment)
	}{
		{"after its resume", func(env *testsuite.TestWorkflowEnvironment) {
			env.SignalWorkflow(rollout.SignalResume, rollout.ResumeRequest{CheckpointID: "cp-1"})
			env.SignalWorkflow(rollout.SignalPark, rollout.ParkRequest{CheckpointID: "cp-1", Deadline: env.Now().Add(time.Hour)})
		}},
		{"past its deadline", func(env *testsuite.TestWorkflowEnvironment) {
			env.SignalWorkflow(rollout.SignalPark, rollout.ParkRequest{CheckpointID: "cp-2", Deadline: env.Now().Add(-time.Hour)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t, newWorld(3))
			env.SetTestTimeout(30 * time.Second)
			env.RegisterDelayedCallback(func() { tc.send(env) }, time.Millisecond)
			env.ExecuteWorkflow(rollout.Rollout, input(16))
			res := result(t, env)
			require.Equal(t, 1.0, res.Reward, "the rollout ran to its end without parking")
		})
	}
}

// leaseRun parks a rollout (mid-episode, by signal) for cp-1 with a lease
// ending at lease past the start, runs then at each offset of later (from
// the start), and returns the result, the workflow time the run ended and
// the durations of the timers it started.
func leaseRun(t *testing.T, lease time.Duration, later map[time.Duration]func(env *testsuite.TestWorkflowEnvironment, start time.Time)) (rollout.Result, time.Duration, []time.Duration) {
	t.Helper()
	w := newWorld(3)
	w.operateErr = closedFor(1) // wait on a timer mid-episode, as above
	env := newEnv(t, w)
	env.SetTestTimeout(30 * time.Second)
	var timers []time.Duration
	env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { timers = append(timers, d) })
	start := env.Now()
	env.RegisterDelayedCallback(func() {
		req := rollout.ParkRequest{CheckpointID: "cp-1", Deadline: start.Add(time.Minute)}
		if lease > 0 {
			req.LeaseUntil = start.Add(lease)
		}
		env.SignalWorkflow(rollout.SignalPark, req)
	}, time.Millisecond)
	for at, f := range later {
		env.RegisterDelayedCallback(func() { f(env, start) }, at)
	}
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)
	return res, env.Now().Sub(start), timers
}

// A rollout parked by a checkpoint that never releases it (its coordinator
// vanished) resumes by itself when the park's lease ends, and finishes as
// an uninterrupted run does.
func TestRolloutParkLeaseExpiresWithoutResume(t *testing.T) {
	res, took, _ := leaseRun(t, 2*time.Hour, nil)
	require.Equal(t, 1.0, res.Reward, "the rollout finished after its lease ended")
	require.GreaterOrEqual(t, took, 2*time.Hour, "it stayed parked until the lease ended")
	require.Less(t, took, 3*time.Hour, "and not much longer")
}

// A renewal (a park of the same checkpoint with a later lease) extends the
// hold; a rollout released in time resumes at once and no lease ends it
// later; a park with no lease starts no lease timer and holds until
// released.
func TestRolloutParkLeaseRenewedAndReleased(t *testing.T) {
	t.Run("renewed", func(t *testing.T) {
		res, took, _ := leaseRun(t, 2*time.Hour, map[time.Duration]func(*testsuite.TestWorkflowEnvironment, time.Time){
			time.Hour: func(env *testsuite.TestWorkflowEnvironment, start time.Time) {
				env.SignalWorkflow(rollout.SignalPark, rollout.ParkRequest{
					CheckpointID: "cp-1", Deadline: start.Add(time.Minute), LeaseUntil: start.Add(5 * time.Hour)})
			},
		})
		require.Equal(t, 1.0, res.Reward)
		require.GreaterOrEqual(t, took, 5*time.Hour, "the renewed lease held it")
		require.Less(t, took, 6*time.Hour)
	})
	t.Run("released in time", func(t *testing.T) {
		res, took, _ := leaseRun(t, 2*time.Hour, map[time.Duration]func(*testsuite.TestWorkflowEnvironment, time.Time){
			10 * time.Minute: func(env *testsuite.TestWorkflowEnvironment, _ time.Time) {
				env.SignalWorkflow(rollout.SignalResume, rollout.ResumeRequest{CheckpointID: "cp-1"})
			},
		})
		require.Equal(t, 1.0, res.Reward)
		require.GreaterOrEqual(t, took, 10*time.Minute, "it waited for the release")
		require.Less(t, took, 11*time.Minute, "and went on at the release, not at the lease")
	})
	t.Run("no lease", func(t *testing.T) {
		res, took, timers := leaseRun(t, 0, map[time.Duration]func(*testsuite.TestWorkflowEnvironment, time.Time){
			10 * time.Hour: func(env *testsuite.TestWorkflowEnvironment, _ time.Time) {
				env.SignalWorkflow(rollout.SignalResume, rollout.ResumeRequest{CheckpointID: "cp-1"})
			},
		})
		require.Equal(t, 1.0, res.Reward)
		require.GreaterOrEqual(t, took, 10*time.Hour, "a park with no lease holds until released")
		for _, d := range timers {
			require.LessOrEqual(t, d, time.Minute, "no lease timer was started")
		}
	})
}

// A park signal whose lease has already ended parks nothing.
func TestRolloutIgnoresParkWithEndedLease(t *testing.T) {
	env := newEnv(t, newWorld(3))
	env.SetTestTimeout(30 * time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(rollout.SignalPark, rollout.ParkRequest{
			CheckpointID: "cp-1", Deadline: env.Now().Add(time.Hour), LeaseUntil: env.Now().Add(-time.Second)})
	}, time.Millisecond)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	require.Equal(t, 1.0, result(t, env).Reward)
}
