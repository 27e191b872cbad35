package rollout_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// notices records the NotifyAdmission local activity's notices.
type notices struct {
	mu   sync.Mutex
	got  []rollout.AdmissionNotice
	fail error
}

func (n *notices) register(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(func(_ context.Context, in rollout.AdmissionNotice) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.got = append(n.got, in)
		return n.fail
	}, activity.RegisterOptions{Name: rollout.NotifyAdmissionName})
}

func (n *notices) outcomes() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, x := range n.got {
		out = append(out, x.Outcome)
	}
	return out
}

func admitted(maxTurns int) rollout.Input {
	in := input(maxTurns)
	in.Admission = true
	return in
}

// TestAdmittedRolloutNotifiesOnce: a rollout its set's admission started
// tells it once that it stopped working: when its result is held (not when
// it is acknowledged later), when it completes without holding, when it
// fails. One that was not admitted says nothing.
func TestAdmittedRolloutNotifiesOnce(t *testing.T) {
	tests := []struct {
		name  string
		in    func() rollout.Input
		setup func(w *world, env *testsuite.TestWorkflowEnvironment)
		want  []string
	}{
		{"completed", func() rollout.Input { return admitted(16) }, nil, []string{rollout.OutcomeCompleted}},
		{"held, then acknowledged", func() rollout.Input { in := admitted(16); in.RequireAck = true; return in },
			func(_ *world, env *testsuite.TestWorkflowEnvironment) {
				env.RegisterDelayedCallback(func() {
					v, err := env.QueryWorkflow(rollout.QueryStatus)
					require.NoError(t, err)
					var st rollout.Status
					require.NoError(t, v.Get(&st))
					env.UpdateWorkflowNoRejection(rollout.UpdateAcknowledge, "ack", t, rollout.AckRequest{Receipt: *st.Result.Receipt})
				}, time.Hour)
			}, []string{rollout.OutcomeHeld}},
		{"failed", func() rollout.Input { return admitted(16) },
			func(w *world, _ *testsuite.TestWorkflowEnvironment) {
				w.modelErr = temporal.NewNonRetryableApplicationError("bad request", rollout.ErrModelRequest, nil)
			}, []string{rollout.OutcomeFailed}},
		{"cancelled", func() rollout.Input { in := admitted(16); in.RequireAck = true; return in },
			func(_ *world, env *testsuite.TestWorkflowEnvironment) {
				env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
			}, []string{rollout.OutcomeHeld}},
		{"not admitted", func() rollout.Input { return input(16) }, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(3)
			env := newEnv(t, w)
			var n notices
			n.register(env)
			if tt.setup != nil {
				tt.setup(w, env)
			}
			env.ExecuteWorkflow(rollout.Rollout, tt.in())
			require.True(t, env.IsWorkflowCompleted())
			require.Equal(t, tt.want, n.outcomes())
			for _, x := range n.got {
				require.Equal(t, rollout.AdmissionNotice{Set: "s", RolloutID: "r1", Attempt: 0, Outcome: x.Outcome}, x)
			}
		})
	}
}

// TestAdmittedRolloutCancelledMidEpisodeNotifies: a rollout cancelled while
// it works (its group failed) reports, on a disconnected context.
func TestAdmittedRolloutCancelledMidEpisodeNotifies(t *testing.T) {
	w := newWorld(3)
	w.modelBlock = make(chan struct{})
	env := newEnv(t, w)
	var n notices
	n.register(env)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	env.ExecuteWorkflow(rollout.Rollout, admitted(16))
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()), "%v", env.GetWorkflowError())
	require.Equal(t, []string{rollout.OutcomeFailed}, n.outcomes())
}

// TestAdmittedRolloutContinuingAsNewSaysNothing: a run that continues as
// new still works; the notice comes from the run that ends.
func TestAdmittedRolloutContinuingAsNewSaysNothing(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	var n notices
	n.register(env)
	env.SetContinueAsNewSuggested(true)
	env.ExecuteWorkflow(rollout.Rollout, admitted(16))
	next := continuedAs(t, env)
	require.True(t, next.Admission, "the next run keeps reporting to the admission")
	require.Empty(t, n.outcomes())
}

// TestAdmittedRolloutNoticeFailureIsHarmless: a notice that cannot be sent
// does not fail the rollout (the admission reconciles by itself).
func TestAdmittedRolloutNoticeFailureIsHarmless(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	n := notices{fail: temporal.NewNonRetryableApplicationError("no", rollout.ErrBadInput, nil)}
	n.register(env)
	env.ExecuteWorkflow(rollout.Rollout, admitted(16))
	res := result(t, env)
	require.Equal(t, 1.0, res.Reward)
	require.Equal(t, []string{rollout.OutcomeCompleted}, n.outcomes())
}
