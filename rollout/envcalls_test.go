package rollout_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/rollout"
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
