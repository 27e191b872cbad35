package rollout

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"
)

// How environment operations run (Limits.EnvActivities).
const (
	EnvActivitiesLocal   = "local"
	EnvActivitiesRegular = "regular"
)

// Defaults and bounds of the environment-call settings.
const (
	DefaultEnvHeartbeatTimeout = 5 * time.Second
	DefaultWorkflowTaskTimeout = 10 * time.Second
	// MaxWorkflowTaskTimeout is Temporal's own bound.
	MaxWorkflowTaskTimeout = 2 * time.Minute
)

// validateEnvCalls checks the environment-call settings of l.
func (l Limits) validateEnvCalls() error {
	switch l.EnvActivities {
	case "", EnvActivitiesLocal, EnvActivitiesRegular:
	default:
		return fmt.Errorf("limits.env_activities %q is neither %q nor %q", l.EnvActivities, EnvActivitiesLocal, EnvActivitiesRegular)
	}
	if h := l.EnvHeartbeatTimeout; h != 0 && (h < Duration(MinBudget) || h > Duration(MaxCallTimeout)) {
		return fmt.Errorf("limits.env_heartbeat_timeout %s is outside %s..%s (or unset for the default)", time.Duration(h), MinBudget, MaxCallTimeout)
	}
	if w := l.WorkflowTaskTimeout; w != 0 && (w < Duration(MinBudget) || w > Duration(MaxWorkflowTaskTimeout)) {
		return fmt.Errorf("limits.workflow_task_timeout %s is outside %s..%s (or unset for the default)", time.Duration(w), MinBudget, MaxWorkflowTaskTimeout)
	}
	return nil
}

func (l Limits) envHeartbeatTimeout() time.Duration {
	if l.EnvHeartbeatTimeout == 0 {
		return DefaultEnvHeartbeatTimeout
	}
	return time.Duration(l.EnvHeartbeatTimeout)
}

// localEnvRetryWindow is how long a local environment call retries: the
// time left before the rollout's deadline (scheduleToClose), or without one
// MaxCallTimeout, so that it retries as long as a regular activity would.
// Unset, the SDK would take the start-to-close timeout: an environment
// server cut off for longer than one call's timeout (a partition, a hung
// server) would fail the rollout instead of delaying it.
func localEnvRetryWindow(scheduleToClose time.Duration) time.Duration {
	if scheduleToClose > 0 {
		return scheduleToClose
	}
	return MaxCallTimeout
}

// localEnv says whether the run's environment operations are local
// activities (the default) rather than regular ones.
func (r *rollout) localEnv() bool { return r.in.Limits.EnvActivities != EnvActivitiesRegular }

// callEnv runs the environment activity name with in and decodes its result
// into out, under the rollout's budgets: a local activity, unless the limits
// ask for a regular activity that heartbeats. A local activity's failure
// comes back unwrapped (no ActivityError around it); isType and the budget
// checks read both shapes.
func (r *rollout) callEnv(ctx workflow.Context, name, summary string, in, out any) error {
	actx, err := r.activityCtx(ctx, r.envActivityOptions(), summary)
	if err != nil {
		return err
	}
	if !r.localEnv() {
		return workflow.ExecuteActivity(actx, name, in).Get(ctx, out)
	}
	opts := workflow.GetActivityOptions(actx)
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: localEnvRetryWindow(opts.ScheduleToCloseTimeout),
		StartToCloseTimeout:    opts.StartToCloseTimeout,
		RetryPolicy:            opts.RetryPolicy,
		Summary:                summary,
	})
	return workflow.ExecuteLocalActivity(lctx, name, in).Get(ctx, out)
}
