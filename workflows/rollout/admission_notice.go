package rollout

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// NotifyAdmissionName is the local activity a rollout admitted by its set's
// admission workflow (package workflows/set) tells it, once, that it has
// stopped working: it holds its result for acknowledgement, completed, or
// failed. The admission workflow then starts the next queued rollout.
const NotifyAdmissionName = "NotifyAdmission"

// Outcomes a rollout reports to its set's admission.
const (
	OutcomeHeld      = "held"
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
)

// AdmissionNotice is a rollout's notice to its set's admission workflow:
// this attempt of this rollout no longer works. The admission counts a
// notice only for an attempt at least the one it admitted, so a run of a
// world a restore replaced cannot free a slot of the restored one.
type AdmissionNotice struct {
	Set       string `json:"set"`
	RolloutID string `json:"rollout_id"`
	Attempt   int    `json:"attempt"`
	Outcome   string `json:"outcome"`
}

// notifyOptions: the notice is one signal. It is a local activity (one
// marker event, inside the workflow task the rollout makes anyway), tried a
// few times and then given up: an admission that never hears of a rollout
// finds out by itself (it reconciles with Temporal when it hears nothing).
var notifyOptions = workflow.LocalActivityOptions{
	ScheduleToCloseTimeout: 30 * time.Second,
	StartToCloseTimeout:    10 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:        500 * time.Millisecond,
		BackoffCoefficient:     2,
		MaximumInterval:        5 * time.Second,
		NonRetryableErrorTypes: []string{ErrBadInput},
	},
}

// notifyAdmission tells the set's admission workflow this run stopped
// working, once per run. Only runs the admission started (Input.Admission,
// which a continue-as-new, a group retry and a restore keep) notify, so runs
// recorded before admission existed make no new command.
func (r *rollout) notifyAdmission(ctx workflow.Context, outcome string) {
	if !r.in.Admission || r.notified {
		return
	}
	r.notified = true
	n := AdmissionNotice{Set: r.in.Set, RolloutID: r.in.RolloutID, Attempt: r.in.Attempt, Outcome: outcome}
	lctx := workflow.WithLocalActivityOptions(ctx, notifyOptions)
	if err := workflow.ExecuteLocalActivity(lctx, NotifyAdmissionName, n).Get(ctx, nil); err != nil {
		r.logger.Warn("notice to the set's admission failed; it reconciles by itself", "error", err)
	}
}

// notifyFailed reports a run that ends with err to the set's admission,
// unless err continues the rollout as a new run (continue-as-new, a group
// retry): the rollout still works then. A cancelled run reports on a
// disconnected context.
func (r *rollout) notifyFailed(ctx workflow.Context, err error) {
	if err == nil || !r.in.Admission || workflow.IsContinueAsNewError(err) {
		return
	}
	if temporal.IsCanceledError(err) {
		dctx, cancel := workflow.NewDisconnectedContext(ctx)
		defer cancel()
		r.notifyAdmission(dctx, OutcomeFailed)
		return
	}
	r.notifyAdmission(ctx, OutcomeFailed)
}
