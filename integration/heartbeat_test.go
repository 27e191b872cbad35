package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	enums "go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/internal/failpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// TestEnvCallHeartbeatRetriesKilledWorker runs a rollout whose environment
// operations are regular activities with a heartbeat timeout of 2s and a
// start-to-close of 10m, and SIGKILLs its worker right after a mutation was
// applied and before the activity reported. A fresh worker retries the call
// because its heartbeat timed out: the history's retried start says so,
// and the rollout ends long before the start-to-close (the test's own
// deadline is 4m). The retry is answered from the stored response.
func TestEnvCallHeartbeatRetriesKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newCluster(t)
	c.startTemporal()
	c.startEnvServer()
	c.startPolicyServer("--latency", "0s", "--jitter", "0s")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	doomed := c.startWorker("TURNSTILE_FAILPOINTS=" + failpoint.WorkerEnvAppliedBeforeReport + "=kill@2")
	before := c.envStats(ctx)
	in := counterInput("beat", 0, 3)
	in.Limits.EnvActivities = rollout.EnvActivitiesRegular
	in.Limits.EnvHeartbeatTimeout = rollout.Duration(2 * time.Second)
	in.Limits.EnvCallTimeout = rollout.Duration(10 * time.Minute)
	run := c.submit(ctx, in)
	c.replaceWhenDead(ctx, doomed)

	var res rollout.Result
	require.NoError(t, run.Get(ctx, &res))
	require.Equal(t, 1.0, res.Reward)
	after := c.envStats(ctx)
	require.Equal(t, int64(1+3+1), after.Applied-before.Applied, "the seed, three increments and the verify, each applied once")
	require.Positive(t, after.Replayed-before.Replayed, "the retried mutation was replayed, not re-applied")
	require.True(t, retriedAfterHeartbeatTimeout(ctx, t, c, run.GetID(), run.GetRunID()),
		"an environment call was retried after its heartbeat timed out")
}

// retriedAfterHeartbeatTimeout says whether the run's history holds an
// environment activity started again after a heartbeat timeout.
func retriedAfterHeartbeatTimeout(ctx context.Context, t *testing.T, c *cluster, workflowID, runID string) bool {
	t.Helper()
	iter := c.client.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	envTypes := map[int64]string{} // scheduled event id → activity type
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			envTypes[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		a := ev.GetActivityTaskStartedEventAttributes()
		if a == nil || envTypes[a.GetScheduledEventId()] != rollout.OperateEnvironmentName || a.GetAttempt() < 2 {
			continue
		}
		if a.GetLastFailure().GetTimeoutFailureInfo().GetTimeoutType() == enums.TIMEOUT_TYPE_HEARTBEAT {
			return true
		}
	}
	return false
}
