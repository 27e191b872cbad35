package rollout_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// budgetFailure asserts the run failed with ErrBudgetExhausted of budget and
// returns its message.
func budgetFailure(t *testing.T, env *testsuite.TestWorkflowEnvironment, budget string) string {
	t.Helper()
	require.True(t, env.IsWorkflowCompleted(), "the rollout ended instead of hanging")
	err := env.GetWorkflowError()
	require.Error(t, err)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, rollout.ErrBudgetExhausted, ae.Type())
	require.True(t, ae.NonRetryable())
	var details rollout.BudgetFailure
	require.NoError(t, ae.Details(&details))
	require.Equal(t, budget, details.Budget)
	return ae.Error()
}

// activityLog records the timeouts every activity started with, regular
// and local alike.
type activityLog struct {
	mu    sync.Mutex
	infos []activity.Info
}

func (l *activityLog) listen(env *testsuite.TestWorkflowEnvironment) {
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		l.add(info)
	})
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		l.add(info)
	})
}

func (l *activityLog) add(info *activity.Info) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.infos = append(l.infos, *info)
}

// phases records the RolloutPhase values the workflow upserts.
func phases(env *testsuite.TestWorkflowEnvironment) *[]string {
	var seen []string
	key := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutPhase)
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		if p, ok := args.Get(0).(temporal.SearchAttributes).GetKeyword(key); ok {
			seen = append(seen, p)
		}
	})
	return &seen
}

// failModelFromTurn makes every model call from turn on fail with a
// retryable error (a model server that went down mid-episode).
func failModelFromTurn(w *world, turn int) {
	w.operateHook = func(in rollout.OperateEnvironmentInput) {
		if in.RequestID == protocol.OperateRequestID("r1", turn-1, 0) {
			w.modelErr = temporal.NewApplicationError("503 model overloaded", "ModelUnavailable")
		}
	}
}

func TestBudgetModelCallRetriesExhausted(t *testing.T) {
	w := newWorld(5)
	failModelFromTurn(w, 3)
	env := newEnv(t, w)
	seen := phases(env)
	in := input(16)
	in.Limits.ModelCallRetries = 3
	env.ExecuteWorkflow(rollout.Rollout, in)

	msg := budgetFailure(t, env, rollout.BudgetModelCallRetries)
	require.Contains(t, msg, "model-call retries (3) exhausted at turn 3: 503 model overloaded")
	require.Len(t, w.calls, 2+3, "two good turns, then three attempts of turn 3")
	require.Equal(t, string(rollout.PhaseFailed), (*seen)[len(*seen)-1], "RolloutPhase ends failed")
}

// A model call that never answers is cut at model_call_timeout, and the
// timeout counts as an attempt. (The test environment never retries a timed
// out attempt, unlike the server, so one attempt is the budget here.)
func TestBudgetModelCallTimeout(t *testing.T) {
	w := newWorld(3)
	w.modelBlock = make(chan struct{}) // never answers
	env := newEnv(t, w)
	var log activityLog
	log.listen(env)
	in := input(16)
	in.Limits.ModelCallTimeout = rollout.Duration(time.Second)
	in.Limits.ModelCallRetries = 1
	began := time.Now()
	env.ExecuteWorkflow(rollout.Rollout, in)

	msg := budgetFailure(t, env, rollout.BudgetModelCallRetries)
	require.Contains(t, msg, "model-call retries (1) exhausted at turn 1: timed out (StartToClose)")
	require.Less(t, time.Since(began), 10*time.Second, "cut at 1s, not at the 5m default")
	require.Len(t, w.calls, 1)
	for _, info := range log.infos {
		if info.ActivityType.Name == rollout.CallModelName {
			require.Equal(t, time.Second, info.StartToCloseTimeout)
		}
	}
}

func TestBudgetEnvCallTimeout(t *testing.T) {
	w := newWorld(2)
	env := newEnv(t, w)
	var log activityLog
	log.listen(env)
	// The first two attempts hang (a hung environment server): each is cut
	// at env_call_timeout and retried with the same request id, and the
	// third is answered.
	var hung atomic.Int32
	env.OnActivity(rollout.OperateEnvironmentName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in rollout.OperateEnvironmentInput) (rollout.OperateEnvironmentResult, error) {
			if hung.Add(1) <= 2 {
				<-ctx.Done()
				return rollout.OperateEnvironmentResult{}, ctx.Err()
			}
			return w.operate(ctx, in)
		})
	in := input(16)
	in.Limits.EnvCallTimeout = rollout.Duration(time.Second)
	began := time.Now()
	env.ExecuteWorkflow(rollout.Rollout, in)

	require.Equal(t, 1.0, result(t, env).Reward, "the retried call went through")
	require.Greater(t, hung.Load(), int32(2))
	require.Less(t, time.Since(began), 10*time.Second, "each hung attempt cut at 1s, not at the 15s default")
	for id, n := range w.applied {
		require.Equal(t, 1, n, "%s applied once", id)
	}
	for _, info := range log.infos {
		want := time.Second
		if info.ActivityType.Name == rollout.CallModelName {
			want = rollout.DefaultModelCallTimeout
		}
		require.Equal(t, want, info.StartToCloseTimeout, info.ActivityType.Name)
	}
}

func TestBudgetDeadlinePassesMidEpisode(t *testing.T) {
	w := newWorld(5)
	failModelFromTurn(w, 2) // unlimited retries: only the deadline ends them
	env := newEnv(t, w)
	seen := phases(env)
	in := input(16)
	in.Limits.Deadline = rollout.Duration(2 * time.Minute)
	env.ExecuteWorkflow(rollout.Rollout, in)

	msg := budgetFailure(t, env, rollout.BudgetDeadline)
	require.Contains(t, msg, "rollout deadline 2m0s passed at turn 2")
	require.Contains(t, msg, "503 model overloaded", "the last failure is kept")
	require.Equal(t, string(rollout.PhaseFailed), (*seen)[len(*seen)-1])
}

func TestBudgetDeadlineEndsEndlessParkedEnvironment(t *testing.T) {
	w := newWorld(3)
	w.operateErr = func(int) error {
		return temporal.NewNonRetryableApplicationError("admission closed", rollout.ErrParked, nil)
	}
	env := newEnv(t, w)
	var log activityLog
	log.listen(env)
	in := input(16)
	in.Limits.Deadline = rollout.Duration(10 * time.Second)
	env.ExecuteWorkflow(rollout.Rollout, in)

	msg := budgetFailure(t, env, rollout.BudgetDeadline)
	require.Contains(t, msg, "rollout deadline 10s passed at turn 1")
	// Every call is bounded by the time left (the test clock moves by the
	// 1s parked-retry timers): the last one, at 9s, had 1s.
	require.Greater(t, len(log.infos), 10)
	for _, info := range log.infos {
		require.Positive(t, info.ScheduleToCloseTimeout)
		require.LessOrEqual(t, info.ScheduleToCloseTimeout, 10*time.Second)
		require.LessOrEqual(t, info.StartToCloseTimeout, info.ScheduleToCloseTimeout)
	}
	require.Equal(t, time.Second, log.infos[len(log.infos)-1].ScheduleToCloseTimeout)
}

func TestBudgetDeadlineCarriedThroughContinueAsNew(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	env.SetStartTime(start)
	env.SetContinueAsNewSuggested(true)
	in := input(16)
	in.Limits.Deadline = rollout.Duration(time.Hour)
	env.ExecuteWorkflow(rollout.Rollout, in)

	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	var next rollout.Input
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.True(t, next.Limits.DeadlineAt.Equal(start.Add(time.Hour)), "deadline_at %v", next.Limits.DeadlineAt)
	require.Equal(t, rollout.Duration(time.Hour), next.Limits.Deadline)
}

func TestBudgetRestoredAttemptKeepsItsDeadline(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	env.SetStartTime(start)
	in := input(16)
	in.Attempt = 1
	in.Resume = &rollout.Boundary{RolloutID: "r1", Turn: 2, Seeded: true, Style: envs.StyleTools}
	// The first attempt started 15 minutes before this one, with a 10m budget.
	in.Limits.Deadline = rollout.Duration(10 * time.Minute)
	in.Limits.DeadlineAt = start.Add(-5 * time.Minute)
	env.ExecuteWorkflow(rollout.Rollout, in)

	msg := budgetFailure(t, env, rollout.BudgetDeadline)
	require.Contains(t, msg, "rollout deadline 10m0s passed at turn 3")
	require.Empty(t, w.calls, "no call starts after the deadline")
}

func TestBudgetDefaultsUnchanged(t *testing.T) {
	w := newWorld(3)
	w.modelErr = temporal.NewApplicationError("503 model overloaded", "ModelUnavailable")
	env := newEnv(t, w)
	var log activityLog
	log.listen(env)
	// With no budgets a flaky model is retried without limit: here it
	// recovers after 6 failures.
	env.OnActivity(rollout.CallModelName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in rollout.CallModelInput) (rollout.CallModelResult, error) {
			if activity.GetInfo(ctx).Attempt > 6 {
				w.mu.Lock()
				w.modelErr = nil
				w.mu.Unlock()
			}
			return w.model(ctx, in)
		})
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)

	require.Equal(t, 1.0, res.Reward)
	for _, info := range log.infos {
		want := rollout.DefaultEnvCallTimeout
		if info.ActivityType.Name == rollout.CallModelName {
			want = rollout.DefaultModelCallTimeout
			require.Equal(t, 10*time.Second, info.HeartbeatTimeout)
		}
		require.Equal(t, want, info.StartToCloseTimeout, info.ActivityType.Name)
	}
}

func TestLimitsValidate(t *testing.T) {
	d := func(s string) rollout.Duration {
		v, err := time.ParseDuration(s)
		require.NoError(t, err)
		return rollout.Duration(v)
	}
	tests := []struct {
		name   string
		limits rollout.Limits
		want   string // "" = valid
	}{
		{"defaults", rollout.Limits{}, ""},
		{"all set", rollout.Limits{ModelCallTimeout: d("2m"), EnvCallTimeout: d("30s"), ModelCallRetries: 5, Deadline: d("1h")}, ""},
		{"model timeout too short", rollout.Limits{ModelCallTimeout: d("500ms")}, "limits.model_call_timeout 500ms"},
		{"model timeout negative", rollout.Limits{ModelCallTimeout: d("-1s")}, "limits.model_call_timeout"},
		{"env timeout too long", rollout.Limits{EnvCallTimeout: d("25h")}, "limits.env_call_timeout 25h0m0s"},
		{"negative retries", rollout.Limits{ModelCallRetries: -1}, "limits.model_call_retries -1"},
		{"too many retries", rollout.Limits{ModelCallRetries: rollout.MaxModelCallRetries + 1}, "limits.model_call_retries"},
		{"deadline too short", rollout.Limits{Deadline: d("10ms")}, "limits.deadline 10ms"},
		{"negative deadline", rollout.Limits{Deadline: d("-1m")}, "limits.deadline"},
		{"env calls local", rollout.Limits{EnvActivities: rollout.EnvActivitiesLocal, WorkflowTaskTimeout: d("20s")}, ""},
		{"env calls regular", rollout.Limits{EnvActivities: rollout.EnvActivitiesRegular, EnvHeartbeatTimeout: d("2s")}, ""},
		{"env calls unknown", rollout.Limits{EnvActivities: "eager"}, `limits.env_activities "eager"`},
		{"env heartbeat too short", rollout.Limits{EnvHeartbeatTimeout: d("100ms")}, "limits.env_heartbeat_timeout 100ms"},
		{"task timeout too long", rollout.Limits{WorkflowTaskTimeout: d("3m")}, "limits.workflow_task_timeout 3m0s"},
		{"task timeout negative", rollout.Limits{WorkflowTaskTimeout: d("-1s")}, "limits.workflow_task_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.limits.Validate()
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestRolloutRefusesBadBudget(t *testing.T) {
	w := newWorld(3)
	env := newEnv(t, w)
	in := input(16)
	in.Limits.ModelCallRetries = -2
	env.ExecuteWorkflow(rollout.Rollout, in)
	var ae *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &ae)
	require.Equal(t, rollout.ErrInvalidInput, ae.Type())
	require.Contains(t, ae.Error(), "limits.model_call_retries")
	require.Empty(t, w.calls)
}

func TestLimitsJSON(t *testing.T) {
	var l rollout.Limits
	require.NoError(t, json.Unmarshal([]byte(`{"max_turns":4,"model_call_timeout":"90s","env_call_timeout":"1m","model_call_retries":3,"deadline":"1h30m"}`), &l))
	require.Equal(t, rollout.Limits{
		MaxTurns: 4, ModelCallTimeout: rollout.Duration(90 * time.Second), EnvCallTimeout: rollout.Duration(time.Minute),
		ModelCallRetries: 3, Deadline: rollout.Duration(90 * time.Minute),
	}, l)
	out, err := json.Marshal(l)
	require.NoError(t, err)
	require.JSONEq(t, `{"max_turns":4,"model_call_timeout":"1m30s","env_call_timeout":"1m0s","model_call_retries":3,"deadline":"1h30m0s"}`, string(out))

	// Inputs without budgets encode exactly as before budgets existed, so
	// park records and recorded histories are unchanged.
	out, err = json.Marshal(rollout.Limits{MaxTurns: 4})
	require.NoError(t, err)
	require.JSONEq(t, `{"max_turns":4}`, string(out))

	require.ErrorContains(t, json.Unmarshal([]byte(`{"deadline":600}`), &l), `want a string such as "90s"`)
	require.ErrorContains(t, json.Unmarshal([]byte(`{"deadline":"ten minutes"}`), &l), `duration "ten minutes"`)
}
