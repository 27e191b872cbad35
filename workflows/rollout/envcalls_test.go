package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/participants/protocol"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// startedKinds records, per activity type, whether each start was a local
// activity.
func startedKinds(env *testsuite.TestWorkflowEnvironment) map[string][]activity.Info {
	seen := map[string][]activity.Info{}
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		seen[info.ActivityType.Name] = append(seen[info.ActivityType.Name], *info)
	})
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
		seen[info.ActivityType.Name] = append(seen[info.ActivityType.Name], *info)
	})
	return seen
}

// Environment operations run as local activities unless the limits ask for
// regular ones; model calls are always regular activities. A regular
// environment call carries the heartbeat timeout, far below its
// start-to-close, so a dead worker is noticed in seconds.
func TestRolloutEnvActivityKinds(t *testing.T) {
	tests := []struct {
		name      string
		limits    rollout.Limits
		local     bool
		heartbeat time.Duration
	}{
		{"default is local", rollout.Limits{}, true, 0},
		{"local", rollout.Limits{EnvActivities: rollout.EnvActivitiesLocal}, true, 0},
		{"regular, default heartbeat", rollout.Limits{EnvActivities: rollout.EnvActivitiesRegular}, false, rollout.DefaultEnvHeartbeatTimeout},
		{"regular, heartbeat set", rollout.Limits{EnvActivities: rollout.EnvActivitiesRegular, EnvHeartbeatTimeout: rollout.Duration(2 * time.Second)}, false, 2 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(2)
			env := newEnv(t, w)
			seen := startedKinds(env)
			in := input(16)
			tt.limits.MaxTurns = in.Limits.MaxTurns
			in.Limits = tt.limits
			env.ExecuteWorkflow(rollout.Rollout, in)
			res := result(t, env)
			require.Equal(t, 1.0, res.Reward)

			for _, name := range []string{rollout.StartEnvironmentName, rollout.OperateEnvironmentName, rollout.VerifyName} {
				require.NotEmpty(t, seen[name], name)
				for _, info := range seen[name] {
					require.Equal(t, tt.local, info.IsLocalActivity, name)
					if !tt.local {
						require.Equal(t, tt.heartbeat, info.HeartbeatTimeout, name)
						require.Less(t, info.HeartbeatTimeout, info.StartToCloseTimeout, name)
					}
				}
			}
			require.Len(t, w.applied, 3, "the seed and two mutations")
			for id, n := range w.applied {
				require.Equal(t, 1, n, "%s applied once", id)
			}
			for _, info := range seen[rollout.CallModelName] {
				require.False(t, info.IsLocalActivity, "model calls stay regular activities")
			}
		})
	}
}

// StartOptions carries the workflow task timeout a rollout's limits ask for:
// the time after which a dead worker's local environment call runs again.
func TestStartOptionsWorkflowTaskTimeout(t *testing.T) {
	in := input(4)
	require.Zero(t, rollout.StartOptions(in, "q").WorkflowTaskTimeout, "unset: the server's default")
	in.Limits.WorkflowTaskTimeout = rollout.Duration(20 * time.Second)
	require.Equal(t, 20*time.Second, rollout.StartOptions(in, "q").WorkflowTaskTimeout)
}

// upserts records, after each search-attribute upsert, the phase and turn a
// reader then sees, as "phase@turn": an upsert merges into the attributes
// the run has, so one that leaves a value out keeps it.
func upserts(env *testsuite.TestWorkflowEnvironment) *[]string {
	var seen []string
	phaseKey := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutPhase)
	turnKey := temporal.NewSearchAttributeKeyInt64(rollout.SARolloutTurn)
	var phase string
	var turn int64
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		if p, ok := sa.GetKeyword(phaseKey); ok {
			phase = p
		}
		if n, ok := sa.GetInt64(turnKey); ok {
			turn = n
		}
		seen = append(seen, fmt.Sprintf("%s@%d", phase, turn))
	})
	return &seen
}

// With local environment calls a short rollout publishes twice: "model"
// after its seed, and its end. The phases that last only inside a workflow
// task (seeding, environment, verifying) are never published on their own,
// and the turn only with a phase change or after progress_every. Regular
// calls publish every phase a reader can see while the activity runs. A
// parked environment publishes the phase the rollout waits in.
func TestRolloutUpsertsPerTurn(t *testing.T) {
	parkedOnce := func(n int) error {
		if n == 1 {
			return temporal.NewNonRetryableApplicationError("admission closed", rollout.ErrParked, nil)
		}
		return nil
	}
	tests := []struct {
		name       string
		limits     rollout.Limits
		operateErr func(int) error
		want       []string
	}{
		{"local", rollout.Limits{}, nil,
			[]string{"model@0", "completed@3"}},
		{"local, environment parked once", rollout.Limits{}, parkedOnce,
			[]string{"model@0", "environment@1", "model@1", "completed@3"}},
		{"regular", rollout.Limits{EnvActivities: rollout.EnvActivitiesRegular}, nil,
			[]string{"seeding@0", "model@0", "environment@1", "model@1", "environment@2", "model@2", "verifying@3", "completed@3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(2)
			w.operateErr = tt.operateErr
			env := newEnv(t, w)
			seen := upserts(env)
			in := input(16)
			tt.limits.MaxTurns = in.Limits.MaxTurns
			in.Limits = tt.limits
			env.ExecuteWorkflow(rollout.Rollout, in)
			require.Equal(t, 1.0, result(t, env).Reward)
			require.Equal(t, tt.want, *seen)
		})
	}
}

// A working rollout whose phase does not change publishes its turn (and
// RolloutProgressAt) once progress_every has passed since it last
// published, and not more often: here the model call of turn 2 fails once
// and is retried a second later, so turn 2 is published on its own.
func TestRolloutPublishesProgressEvery(t *testing.T) {
	progressAt := temporal.NewSearchAttributeKeyTime(rollout.SARolloutProgressAt)
	w := newWorld(4)
	w.operateHook = func(in rollout.OperateEnvironmentInput) {
		if in.RequestID == protocol.OperateRequestID("r1", 1, 0) {
			w.modelErr = temporal.NewApplicationError("503 model overloaded", "ModelUnavailable")
		}
	}
	env := newEnv(t, w)
	env.OnActivity(rollout.CallModelName, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in rollout.CallModelInput) (rollout.CallModelResult, error) {
			if activity.GetInfo(ctx).Attempt > 1 {
				w.mu.Lock()
				w.modelErr = nil
				w.mu.Unlock()
			}
			return w.model(ctx, in)
		})
	var got []string
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		var keys []string
		for k := range sa.GetUntypedValues() {
			keys = append(keys, k.GetName())
		}
		sort.Strings(keys)
		_, progress := sa.GetTime(progressAt)
		require.True(t, progress || slices.Contains(keys, rollout.SARolloutFinishedAt), "every upsert stamps progress or the finish: %v", keys)
		got = append(got, strings.Join(keys, ","))
	})
	in := input(16)
	in.ProgressAttributes, in.ProgressEvery = true, rollout.Duration(time.Second)
	env.ExecuteWorkflow(rollout.Rollout, in)
	require.Equal(t, 1.0, result(t, env).Reward)
	require.Equal(t, []string{
		"RolloutAttempt,RolloutId,RolloutPhase,RolloutProgressAt,RolloutSet,RolloutTurn", // model@0, and who it is (no start attributes here)
		"RolloutProgressAt,RolloutTurn", // turn 2, a second later
		"RolloutFinishedAt,RolloutPhase,RolloutTurn",
	}, got)
}

// A run that continues as new publishes the turn the next run starts from
// (it inherits this run's search attributes); a phase that lasts only
// inside a workflow task stays unpublished.
func TestRolloutPublishesBeforeContinueAsNew(t *testing.T) {
	w := newWorld(2)
	env := newEnv(t, w)
	seen := upserts(env)
	env.SetContinueAsNewSuggested(true)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, env.GetWorkflowError(), &can)
	require.Equal(t, []string{"model@0", "model@1"}, *seen)
}

// A run started with its identity (RolloutId, RolloutSet, RolloutAttempt:
// rollout.StartOptions sets them) never upserts it again, nor the phase and
// turn its start published; one started without (the Temporal CLI) sends
// it with its first upsert only.
func TestRolloutUpsertsIdentityOnce(t *testing.T) {
	for _, started := range []bool{true, false} {
		t.Run(map[bool]string{true: "started with StartOptions", false: "started bare"}[started], func(t *testing.T) {
			env := newEnv(t, newWorld(2))
			in := input(16)
			if started {
				require.NoError(t, env.SetTypedSearchAttributesOnStart(rollout.StartOptions(in, "q").TypedSearchAttributes))
			}
			var upserts, withIdentity int
			idKey := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutID)
			setKey := temporal.NewSearchAttributeKeyKeyword(rollout.SARolloutSet)
			attemptKey := temporal.NewSearchAttributeKeyInt64(rollout.SARolloutAttempt)
			turnKey := temporal.NewSearchAttributeKeyInt64(rollout.SARolloutTurn)
			var first temporal.SearchAttributes
			env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
				sa := args.Get(0).(temporal.SearchAttributes)
				if upserts == 0 {
					first = sa
				}
				upserts++
				_, id := sa.GetKeyword(idKey)
				_, set := sa.GetKeyword(setKey)
				_, attempt := sa.GetInt64(attemptKey)
				if id || set || attempt {
					withIdentity++
				}
			})
			env.ExecuteWorkflow(rollout.Rollout, in)
			require.Equal(t, 1.0, result(t, env).Reward)
			require.Equal(t, 2, upserts)
			_, turn := first.GetInt64(turnKey)
			if started {
				require.Zero(t, withIdentity, "identity upserted again")
				require.False(t, turn, "turn 0 published again")
			} else {
				require.Equal(t, 1, withIdentity, "identity in %d of %d upserts", withIdentity, upserts)
				require.True(t, turn)
			}
		})
	}
}

// An environment server unreachable for longer than one call's timeout (a
// partition, a hung server) delays the rollout, it does not fail it: a
// local environment call keeps retrying as a regular one would, not only
// for its start-to-close timeout (which the SDK otherwise takes as a local
// activity's schedule-to-close: 15 s of retries, then the rollout failed).
func TestRolloutLocalEnvCallOutlastsAPartition(t *testing.T) {
	w := newWorld(2)
	// Every attempt for over a minute of backoff (0.5 s doubling to 10 s)
	// fails as a cut connection does.
	const failures = 10
	w.operateErr = func(n int) error {
		if n <= failures {
			return fmt.Errorf("dial tcp 10.213.0.2:8080: connect: no route to host")
		}
		return nil
	}
	env := newEnv(t, w)
	env.ExecuteWorkflow(rollout.Rollout, input(16))
	res := result(t, env)
	require.Equal(t, 1.0, res.Reward)
	require.Greater(t, w.operates, failures, "the call was retried past the failures")
	for id, n := range w.applied {
		require.Equal(t, 1, n, "%s applied once", id)
	}
}
