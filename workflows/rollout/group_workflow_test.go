package rollout_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// fakeLedger stands in for the ReportToGroup activity: it records reports
// and answers like the real ledger with a budget (grant an environment
// failure while the budget lasts, fail the group otherwise).
type fakeLedger struct {
	mu      sync.Mutex
	budget  int
	reports []rollout.GroupReport
	// holdFailures keeps failure reports waiting until cancelled, as a
	// ledger busy failing the group through another member.
	holdFailures bool
}

func (l *fakeLedger) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(l.report, activity.RegisterOptions{Name: rollout.ReportToGroupName})
}

func (l *fakeLedger) report(ctx context.Context, r rollout.GroupReport) (rollout.GroupVerdict, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reports = append(l.reports, r)
	if l.holdFailures && r.Kind == rollout.ReportFailure {
		l.mu.Unlock()
		<-ctx.Done()
		l.mu.Lock()
		return rollout.GroupVerdict{}, ctx.Err()
	}
	switch {
	case r.Kind == rollout.ReportDone:
		return rollout.GroupVerdict{Status: rollout.GroupRunning}, nil
	case r.Kind == rollout.ReportFailure && r.Retryable && l.budget > 0:
		l.budget--
		return rollout.GroupVerdict{Status: rollout.GroupRunning, Granted: &rollout.GroupGrant{
			RolloutID: r.RolloutID, Attempt: r.Attempt + 1, Retry: 1, Budget: r.Budget, Reason: r.Reason}}, nil
	}
	return rollout.GroupVerdict{Status: rollout.GroupFailed, Reason: "group retry budget (2) exhausted: " + r.Reason}, nil
}

func (l *fakeLedger) kinds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.reports {
		out = append(out, r.Kind)
	}
	return out
}

// groupInput is repeat 1 of the 3 rollouts of group g of set s.
func groupInput() rollout.Input {
	in := input(16)
	in.RolloutID, in.Group, in.Repeat, in.GroupSize = rollout.GroupRolloutID("s", "g", 1), "g", 1, 3
	return in
}

func newGroupEnv(t *testing.T, w *world, l *fakeLedger) *testsuite.TestWorkflowEnvironment {
	t.Helper()
	env := newEnv(t, w)
	l.register(env)
	return env
}

// refusedVerify is the environment server refusing the verify of attempt 0.
func refusedVerify(in rollout.VerifyInput) error {
	if in.Attempt == 0 {
		return temporal.NewNonRetryableApplicationError("environment verify: 422 bad_state: session lost", rollout.ErrEnvironment, nil)
	}
	return nil
}

// continuedAs returns the input of the run a rollout continued as.
func continuedAs(t *testing.T, env *testsuite.TestWorkflowEnvironment) rollout.Input {
	t.Helper()
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	require.Equal(t, rollout.WorkflowName, can.WorkflowType.Name)
	var next rollout.Input
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	return next
}

// TestGroupRetryGranted: an environment refusal is reported as retryable;
// the grant starts the rollout over from its seed as attempt 1, a new run
// of the same workflow ID, with a deadline of its own.
func TestGroupRetryGranted(t *testing.T) {
	w, l := newWorld(2), &fakeLedger{budget: 2}
	w.verifyErr = refusedVerify
	env := newGroupEnv(t, w, l)
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	env.SetStartTime(start)
	in := groupInput()
	in.Limits.Deadline = rollout.Duration(time.Hour)
	env.ExecuteWorkflow(rollout.Rollout, in)

	next := continuedAs(t, env)
	require.Equal(t, 1, next.Attempt)
	require.Nil(t, next.Resume, "a retry starts over from the seed")
	require.Nil(t, next.Completed)
	require.Equal(t, &rollout.GroupGrant{RolloutID: "s-g-r1", Attempt: 1, Retry: 1, Budget: 2, Reason: l.reports[0].Reason}, next.Retry)
	require.True(t, next.Limits.DeadlineAt.IsZero(), "the retried attempt gets a deadline of its own")
	require.Equal(t, in.Group, next.Group)
	require.Equal(t, in.GroupSize, next.GroupSize)

	require.Len(t, l.reports, 1)
	r := l.reports[0]
	require.Equal(t, rollout.ReportFailure, r.Kind)
	require.True(t, r.Retryable, "an environment refusal is environment-level")
	require.Equal(t, rollout.GroupReport{Set: "s", Group: "g", Size: 3, Budget: rollout.DefaultGroupRetries, RolloutID: "s-g-r1",
		Repeat: 1, Attempt: 0, Kind: rollout.ReportFailure, Retryable: true, Reason: r.Reason}, r)
	require.Contains(t, r.Reason, "verify: environment verify: 422 bad_state: session lost")
}

// TestGroupRetriedAttemptStartsFresh: the granted attempt seeds a fresh
// environment session through StartEnvironment with its grant, runs to the
// end and reports its result. A later attempt that is not the grant's (a
// restore of it) seeds without one.
func TestGroupRetriedAttemptStartsFresh(t *testing.T) {
	for _, tt := range []struct {
		name      string
		attempt   int
		wantGrant bool
	}{{"the granted attempt", 1, true}, {"a restore's later attempt", 2, false}} {
		t.Run(tt.name, func(t *testing.T) {
			w, l := newWorld(2), &fakeLedger{}
			w.verifyErr = refusedVerify
			env := newGroupEnv(t, w, l)
			in := groupInput()
			in.Attempt = tt.attempt
			in.Retry = &rollout.GroupGrant{RolloutID: in.RolloutID, Attempt: 1, Retry: 1, Budget: 2}
			env.ExecuteWorkflow(rollout.Rollout, in)
			res := result(t, env)
			require.Equal(t, 1.0, res.Reward)
			require.Equal(t, tt.attempt, res.Attempt)
			require.Len(t, w.starts, 1)
			require.Equal(t, tt.wantGrant, w.starts[0].Retry != nil, "grant passed to StartEnvironment")
			require.Equal(t, []string{rollout.ReportDone}, l.kinds())
			require.Equal(t, tt.attempt, l.reports[0].Attempt)
		})
	}
}

// TestGroupBudgetExhausted: an environment failure the ledger does not
// retry fails the rollout with ErrGroupFailed and the group's reason, its
// own failure as the cause; nothing continues as new.
func TestGroupBudgetExhausted(t *testing.T) {
	w, l := newWorld(2), &fakeLedger{budget: 0}
	w.verifyErr = refusedVerify
	env := newGroupEnv(t, w, l)
	env.ExecuteWorkflow(rollout.Rollout, groupInput())

	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.False(t, errors.As(err, &can), "no retry without budget")
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, rollout.ErrGroupFailed, ae.Type())
	require.Contains(t, err.Error(), "group g of set s failed: group retry budget (2) exhausted: verify: environment verify: 422 bad_state: session lost")
	require.Equal(t, []string{rollout.ReportFailure}, l.kinds())
}

// TestGroupFailureClassification: only environment-level failures are
// reported retryable. Model-endpoint failures (a refused request, model
// retries spent) and a corrupt transcript are not; the environment's
// refusal of an operation and a deadline that passes while the environment
// keeps failing are. A failure not retried stays the rollout's own.
func TestGroupFailureClassification(t *testing.T) {
	transient := temporal.NewApplicationError("503 environment server down", "EnvUnavailable")
	tests := []struct {
		name      string
		setup     func(*world, *rollout.Input)
		retryable bool
		errType   string
	}{
		{"model request refused", func(w *world, _ *rollout.Input) {
			w.modelErr = temporal.NewNonRetryableApplicationError("model answered 400", rollout.ErrModelRequest, nil)
		}, false, rollout.ErrModelRequest},
		{"model retries spent", func(w *world, in *rollout.Input) {
			w.modelErr = temporal.NewApplicationError("503 model overloaded", "ModelUnavailable")
			in.Limits.ModelCallRetries = 2
		}, false, rollout.ErrBudgetExhausted},
		{"transcript lost", func(w *world, _ *rollout.Input) {
			w.operateErr = func(int) error {
				return temporal.NewNonRetryableApplicationError("blob missing", rollout.ErrTranscript, nil)
			}
		}, false, ""},
		{"environment refused an operation", func(w *world, _ *rollout.Input) {
			w.operateErr = func(int) error {
				return temporal.NewNonRetryableApplicationError("409 revision_mismatch", rollout.ErrEnvironment, nil)
			}
		}, true, rollout.ErrGroupFailed},
		{"deadline while the environment keeps failing", func(w *world, in *rollout.Input) {
			w.operateErr = func(int) error { return transient }
			in.Limits.Deadline = rollout.Duration(20 * time.Second)
		}, true, rollout.ErrGroupFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, l := newWorld(2), &fakeLedger{}
			in := groupInput()
			tt.setup(w, &in)
			env := newGroupEnv(t, w, l)
			env.ExecuteWorkflow(rollout.Rollout, in)

			require.Equal(t, []string{rollout.ReportFailure}, l.kinds())
			require.Equal(t, tt.retryable, l.reports[0].Retryable, "reason %q", l.reports[0].Reason)
			err := env.GetWorkflowError()
			require.Error(t, err)
			if tt.errType != "" {
				require.True(t, hasType(err, tt.errType), "want a %s failure: %v", tt.errType, err)
			}
		})
	}
}

// TestGroupModelErrorNotRetried: with budget left, a model error is still
// not retried: one model call, no new attempt, the model's error.
func TestGroupModelErrorNotRetried(t *testing.T) {
	w, l := newWorld(2), &fakeLedger{budget: 5}
	w.modelErr = temporal.NewNonRetryableApplicationError("model answered 400: bad tool schema", rollout.ErrModelRequest, nil)
	env := newGroupEnv(t, w, l)
	env.ExecuteWorkflow(rollout.Rollout, groupInput())

	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	require.False(t, errors.As(err, &can), "a model error starts no new attempt")
	require.ErrorContains(t, err, "bad tool schema")
	require.Len(t, w.calls, 1)
	require.False(t, l.reports[0].Retryable)
	require.Equal(t, 5, l.budget, "no retry spent")
}

// TestGroupMemberCancelled: a member cancelled (by its failed group's ledger,
// or an operator) tells its group, from a disconnected context.
func TestGroupMemberCancelled(t *testing.T) {
	w, l := newWorld(2), &fakeLedger{}
	w.modelBlock = make(chan struct{})
	env := newGroupEnv(t, w, l)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	env.ExecuteWorkflow(rollout.Rollout, groupInput())

	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "%v", env.GetWorkflowError())
	require.Equal(t, []string{rollout.ReportCanceled}, l.kinds())
}

// TestGroupMemberCancelledWhileReporting: a member cancelled while its
// failure report waits (its group is failing through another member) ends
// cancelled, not failed, and tells its group so.
func TestGroupMemberCancelledWhileReporting(t *testing.T) {
	w, l := newWorld(2), &fakeLedger{holdFailures: true}
	w.verifyErr = refusedVerify
	env := newGroupEnv(t, w, l)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	env.ExecuteWorkflow(rollout.Rollout, groupInput())

	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "%v", env.GetWorkflowError())
	require.Equal(t, []string{rollout.ReportFailure, rollout.ReportCanceled}, l.kinds())
}

// TestRolloutOutsideGroupsMakesNoReport: a rollout without a group, or of a
// group without a size (started before ledgers), never reports (the
// activity is not even registered here).
func TestRolloutOutsideGroupsMakesNoReport(t *testing.T) {
	unsized := groupInput()
	unsized.GroupSize = 0
	for name, in := range map[string]rollout.Input{"no group": input(16), "no group size": unsized} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(2)
			w.verifyErr = refusedVerify
			env := newEnv(t, w)
			env.ExecuteWorkflow(rollout.Rollout, in)
			err := env.GetWorkflowError()
			require.True(t, hasType(err, rollout.ErrEnvironment), "the failure stays the rollout's own: %v", err)
			require.False(t, hasType(err, rollout.ErrGroupFailed), "%v", err)
		})
	}
}

// TestGroupInputValidation: group fields that cannot name a member are
// refused before anything runs.
func TestGroupInputValidation(t *testing.T) {
	for name, mutate := range map[string]func(*rollout.Input){
		"size without group": func(in *rollout.Input) { in.Group = "" },
		"repeat outside":     func(in *rollout.Input) { in.Repeat = 3 },
		"size too large":     func(in *rollout.Input) { in.GroupSize = rollout.MaxGroupSize + 1 },
		"group with a slash": func(in *rollout.Input) { in.Group = "a/b" },
		"negative budget":    func(in *rollout.Input) { in.Limits.GroupRetries = new(-1) },
	} {
		t.Run(name, func(t *testing.T) {
			in := groupInput()
			mutate(&in)
			env := newGroupEnv(t, newWorld(2), &fakeLedger{})
			env.ExecuteWorkflow(rollout.Rollout, in)
			var ae *temporal.ApplicationError
			require.ErrorAs(t, env.GetWorkflowError(), &ae)
			require.Equal(t, rollout.ErrInvalidInput, ae.Type())
		})
	}
}

// TestResultKeepsStepRewardsAndVerifyDetails: each environment operation's
// reward is in the result, in order (gym steps here, 0.25 each, summing to
// the reward), and the verifier's details are stored, named by digest.
func TestResultKeepsStepRewardsAndVerifyDetails(t *testing.T) {
	w := newWorld(3)
	w.style = envs.StyleGym
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)
	require.Equal(t, []float64{0.25, 0.25, 0.25}, res.StepRewards)
	require.Equal(t, 0.75, res.Reward)
	require.Equal(t, w.head("details", 3), res.VerifyDetailsRef)
	require.True(t, w.verifies[0].StoreDetails)
}

// TestRestoredBoundaryWithoutStepRewards: a boundary carried over from a
// run that kept no step rewards does not start keeping them half-way.
func TestRestoredBoundaryWithoutStepRewards(t *testing.T) {
	w := newWorld(3)
	w.value, w.revision = 1, 1
	env := newEnv(t, w)
	in := input(16)
	in.Attempt = 1
	in.Resume = &rollout.Boundary{RolloutID: "r1", Turn: 1, Seeded: true, Style: envs.StyleTools, Revision: 1}
	env.ExecuteWorkflow(rollout.Rollout, in)
	res := result(t, env)
	require.Nil(t, res.StepRewards, "earlier steps' rewards are unknown")
	require.NotEmpty(t, res.VerifyDetailsRef)

	w = newWorld(3)
	w.value, w.revision = 1, 1
	env = newEnv(t, w)
	in.Resume.StepRewards = []float64{0}
	env.ExecuteWorkflow(rollout.Rollout, in)
	require.Equal(t, []float64{0, 0, 0}, result(t, env).StepRewards, "a boundary that kept them goes on")
}

// hasType says whether any application error in err's chain has type typ.
func hasType(err error, typ string) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		var ae *temporal.ApplicationError
		if errors.As(err, &ae) && ae.Type() == typ {
			return true
		}
		if ae != nil {
			err = ae // continue below the first application error found
		}
	}
	return false
}

// TestGroupRestoredRunReportsRestored: a group member a restore starts
// (held for its checkpoint) tells its group first, then its result.
func TestGroupRestoredRunReportsRestored(t *testing.T) {
	w, l := newWorld(2), &fakeLedger{}
	env := newGroupEnv(t, w, l)
	in := groupInput()
	in.Attempt, in.HoldFor = 1, "ck1"
	env.RegisterDelayedCallback(func() {
		require.Equal(t, []string{rollout.ReportRestored}, l.kinds(), "reported while still held")
		env.UpdateWorkflowNoRejection(rollout.UpdateResume, "resume", t, rollout.ResumeRequest{CheckpointID: "ck1"})
	}, time.Minute)
	env.ExecuteWorkflow(rollout.Rollout, in)
	require.Equal(t, 1, result(t, env).Attempt)
	require.Equal(t, []string{rollout.ReportRestored, rollout.ReportDone}, l.kinds())
}

// TestGroupRetryOnLostSession: an environment server that lost the session
// (restarted empty) is retried until the rollout's deadline, then reported
// to the group as environment-level, like a refusal.
func TestGroupRetryOnLostSession(t *testing.T) {
	w, l := newWorld(2), &fakeLedger{budget: 2}
	w.verifyErr = func(in rollout.VerifyInput) error {
		if in.Attempt == 0 {
			return temporal.NewApplicationError("environment verify: 404 unknown_session: no session", rollout.ErrSessionLost)
		}
		return nil
	}
	env := newGroupEnv(t, w, l)
	env.SetStartTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	in := groupInput()
	in.Limits.Deadline = rollout.Duration(time.Hour)
	env.ExecuteWorkflow(rollout.Rollout, in)

	next := continuedAs(t, env)
	require.Equal(t, 1, next.Attempt, "the group granted a retry")
	require.Len(t, l.reports, 1)
	require.True(t, l.reports[0].Retryable, "a lost session is environment-level")
}
