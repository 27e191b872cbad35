package rollout

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// setFenceChange is the workflow.GetVersion change id of the set fence
// check: a run recorded before it (DefaultVersion) never consults the
// record, so its commands are those of before.
const setFenceChange = "set-fence"

// FenceActivities hold the activity a rollout consults its set's fence
// record with. It reads Temporal itself; register a pointer to it on the
// worker beside Activities.
type FenceActivities struct {
	Client Describer
}

// CheckSetFenceInput names the run chain to check.
type CheckSetFenceInput struct {
	Set       string    `json:"set"`
	RolloutID string    `json:"rollout_id"`
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
}

// CheckSetFenceResult says whether a restore fenced the run, and which.
type CheckSetFenceResult struct {
	Fenced bool         `json:"fenced"`
	Window *FenceWindow `json:"window,omitempty"`
}

// CheckSetFence reads the set's fence record and says whether the run
// chain that started at in.StartedAt is of a world a restore rolled back.
// It fails (and is retried) when the record cannot be read: a run never
// goes on unchecked.
func (a *FenceActivities) CheckSetFence(ctx context.Context, in CheckSetFenceInput) (CheckSetFenceResult, error) {
	if err := ValidateSet(in.Set); err != nil {
		return CheckSetFenceResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrBadInput, nil)
	}
	f, err := ReadSetFence(ctx, a.Client, in.Set)
	if err != nil {
		return CheckSetFenceResult{}, err
	}
	w, fenced := f.FencesRun(in.StartedAt)
	if !fenced {
		return CheckSetFenceResult{}, nil
	}
	return CheckSetFenceResult{Fenced: true, Window: &w}, nil
}

// setFenceOptions: the check is one describe; it is retried until it
// answers (a Temporal that cannot be read stops the rollout here, it does
// not let it through).
var setFenceOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        500 * time.Millisecond,
		BackoffCoefficient:     2,
		MaximumInterval:        10 * time.Second,
		NonRetryableErrorTypes: []string{ErrBadInput},
	},
}

// setupSetFence decides, once per run, whether the run consults its set's
// fence record, and notes when its chain started: the first run of an
// attempt's chain, and the first run a restore starts (held for its
// checkpoint: a new chain, whatever the record's input carried).
func (r *rollout) setupSetFence(ctx workflow.Context) {
	if r.in.Set == "" {
		return
	}
	r.setFence = workflow.GetVersion(ctx, setFenceChange, workflow.DefaultVersion, 1) >= 1
	if r.setFence && (r.in.StartedAt == nil || r.in.HoldFor != "") {
		started := workflow.GetInfo(ctx).WorkflowStartTime
		r.in.StartedAt = &started
	}
}

// checkSetFence stops the run when a restore of its set fenced it: before
// its first environment call, and before its result lands. The run fails
// FencedByRestore, touching nothing more; it does not report to its group.
func (r *rollout) checkSetFence(ctx workflow.Context, before string) error {
	if !r.setFence {
		return nil
	}
	in := CheckSetFenceInput{Set: r.in.Set, RolloutID: r.in.RolloutID, Attempt: r.in.Attempt, StartedAt: *r.in.StartedAt}
	var res CheckSetFenceResult
	lctx := workflow.WithLocalActivityOptions(ctx, setFenceOptions)
	if err := workflow.ExecuteLocalActivity(lctx, CheckSetFenceName, in).Get(ctx, &res); err != nil {
		return fmt.Errorf("check the fence of set %s before %s: %w", r.in.Set, before, err)
	}
	if !res.Fenced || res.Window == nil {
		return nil
	}
	w := res.Window
	r.logger.Warn("fenced by a restore of the set", "restore", w.RestoreID, "checkpoint", w.CheckpointID, "before", before)
	r.markFailed(ctx)
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"attempt %d of rollout %s started at %s, before restore %s of checkpoint %s fenced set %s at %s: in the restored world it does not exist, so it stops before %s; re-submit it deliberately as a higher attempt",
		r.in.Attempt, r.in.RolloutID, in.StartedAt.Format(time.RFC3339Nano), w.RestoreID, w.CheckpointID, r.in.Set,
		w.Before.Format(time.RFC3339Nano), before), ErrFencedByRestore, nil)
}
