package rollout

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// CheckSetFenceName is the activity a rollout consults its set's fence
// record with (package workflows/set keeps the record).
const CheckSetFenceName = "CheckSetFence"

// ErrFencedByRestore: a restore of the set replaced the world this run
// started in; the run stops before any environment call or result.
const ErrFencedByRestore = "FencedByRestore"

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

// FenceWindow is one restore's fence: the runs of the set that started
// after From (when the restored checkpoint's Checkpoint workflow started;
// zero when this Temporal never ran it) and no later than Before (when the
// restore wrote its fence) are of the world it rolled back.
type FenceWindow struct {
	RestoreID    string    `json:"restore_id"`
	CheckpointID string    `json:"checkpoint_id"`
	From         time.Time `json:"from"`
	// Before is zero in the memo of the run that carries the window: that
	// run's start time is when the fence took effect (ReadSetFence fills it).
	Before time.Time `json:"before,omitzero"`
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
