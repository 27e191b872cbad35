package rollout

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// groupReportOptions are the options of a report to the group's ledger. It
// is bookkeeping, not an environment call: the rollout's deadline does not
// bound it, and it is retried until Temporal answers.
var groupReportOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
		NonRetryableErrorTypes: []string{ErrBadInput},
	},
}

// maxReasonLen bounds the failure reason a report carries into the ledger.
const maxReasonLen = 2000

// validateGroup checks the group fields of an input.
func (in *Input) validateGroup() error {
	switch {
	case in.GroupSize == 0:
		return nil
	case in.Group == "":
		return errors.New("group_size is set without a group")
	case in.GroupSize < 0 || in.GroupSize > MaxGroupSize:
		return fmt.Errorf("group_size %d is outside 1..%d", in.GroupSize, MaxGroupSize)
	case in.Repeat < 0 || in.Repeat >= in.GroupSize:
		return fmt.Errorf("repeat %d is outside the group's 0..%d", in.Repeat, in.GroupSize-1)
	}
	return ValidateName("group", in.Group, MaxSetLen)
}

// setupGroups records whether this run reports to its group's ledger: the
// rollouts of a sized group do.
func (r *rollout) setupGroups() {
	r.groups = r.in.Group != "" && r.in.GroupSize > 0
}

// environmentFailure says whether a failure is the environment's, which a
// fresh environment may not repeat: the environment server refused the
// request (a crashed session, a task it rejects, a conflict) or lost the
// session (retried until the call's budget ran out), or the deadline passed
// during an environment call (a server that keeps failing or timing out is
// retried by Temporal until then). Model-endpoint failures never are; the
// caller knows which kind of call failed.
func environmentFailure(err, ferr error) bool {
	return isType(err, ErrEnvironment) || isType(err, ErrSessionLost) || isBudget(ferr, BudgetDeadline)
}

// failureReason is a failure in one line for the group's ledger: the
// budget's message, or what failed and the activity's own error.
func failureReason(err, ferr error, what string) string {
	var ae *temporal.ApplicationError
	if errors.As(ferr, &ae) && ae.Type() == ErrBudgetExhausted {
		return Truncate(ae.Message(), maxReasonLen)
	}
	root := rootCause(err)
	msg := root.Error()
	if errors.As(root, &ae) {
		msg = ae.Message() // without the "(type: …, retryable: …)" suffix
	}
	return Truncate(what+": "+msg, maxReasonLen)
}

// groupFailure reports a failure to the group's ledger and acts on the
// verdict: a granted retry starts this rollout over as the next attempt; a
// refused environment failure fails the rollout with ErrGroupFailed and the
// group's reason; any other failure stays the rollout's own (the ledger has
// failed the group for it and cancels the other members).
func (r *rollout) groupFailure(ctx workflow.Context, ferr error, reason string, envFailure bool) error {
	v, err := r.reportToGroup(ctx, ReportFailure, envFailure, reason)
	if temporal.IsCanceledError(err) {
		// Cancelled meanwhile (its group failed through another member):
		// the run ends cancelled, and says so to the group.
		return err
	}
	if err != nil {
		r.markFailed(ctx)
		return fmt.Errorf("%w (and its report to group %s failed: %v)", ferr, r.in.Group, err)
	}
	if v.Granted != nil {
		return r.retryAsNewAttempt(ctx, *v.Granted)
	}
	r.markFailed(ctx)
	if envFailure && v.Status == GroupFailed {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("group %s of set %s failed: %s", r.in.Group, r.in.Set, v.Reason), ErrGroupFailed, ferr)
	}
	return ferr
}

// retryAsNewAttempt starts the rollout over from its seed as the granted
// attempt: a new run of the same workflow ID (continue-as-new) whose seed
// goes to a fresh environment session. An empty boundary comes first, so a
// checkpoint asking now parks the rollout there, and its record starts the
// rollout over on a restore (as a later attempt, with no grant). A relative
// deadline starts again with the new attempt, or an environment that used
// it all up would fail every retry at once.
func (r *rollout) retryAsNewAttempt(ctx workflow.Context, g GroupGrant) error {
	next := r.in
	next.Attempt, next.Retry = g.Attempt, &g
	next.Resume, next.HoldFor, next.Completed = nil, "", nil
	if next.Limits.Deadline != 0 {
		next.Limits.DeadlineAt = time.Time{}
	}
	r.logger.Warn("environment failure: the group retries the rollout as a new attempt",
		"group", r.in.Group, "new_attempt", g.Attempt, "retry", g.Retry, "budget", g.Budget, "reason", g.Reason)
	// This run stays the failed attempt (its search attributes say so);
	// only the boundary starts over.
	r.b = Boundary{RolloutID: r.in.RolloutID, Attempt: r.in.Attempt}
	if err := r.boundary(ctx); err != nil {
		return err
	}
	r.publishDeferred(ctx) // the next run starts with these attributes
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, WorkflowName, next)
}

// reportRestored tells the group a restore started the rollout again, held
// for its checkpoint: a group that had completed (after the cut) is then
// running again until this rollout finishes, and a trainer's view leaves it
// out meanwhile instead of taking it short of this rollout.
func (r *rollout) reportRestored(ctx workflow.Context) {
	if !r.groups || r.in.HoldFor == "" {
		return
	}
	if _, err := r.reportToGroup(ctx, ReportRestored, false, "restored for checkpoint "+r.in.HoldFor); err != nil {
		r.logger.Error("report of the restore to the group failed", "group", r.in.Group, "error", err)
	}
}

// reportDone tells the group the rollout has a result. The verdict does not
// change the result: a failed group's results are excluded by whoever reads
// them (the export marks them), not withdrawn.
func (r *rollout) reportDone(ctx workflow.Context) {
	if !r.groups {
		return
	}
	if _, err := r.reportToGroup(ctx, ReportDone, false, ""); err != nil {
		r.logger.Error("report of the result to the group failed", "group", r.in.Group, "error", err)
	}
}

// reportCanceled tells the group the rollout was cancelled (by an operator,
// or by the ledger of a group that failed), so a group never waits for a
// member that will not finish. The workflow's context is cancelled, so the
// report runs in a disconnected one.
func (r *rollout) reportCanceled(ctx workflow.Context, runErr error) {
	if !r.groups || !temporal.IsCanceledError(runErr) {
		return
	}
	dctx, cancel := workflow.NewDisconnectedContext(ctx)
	defer cancel()
	if _, err := r.reportToGroup(dctx, ReportCanceled, false, "cancelled"); err != nil {
		r.logger.Warn("report of the cancellation to the group failed", "group", r.in.Group, "error", err)
	}
}

// reportToGroup runs the ReportToGroup activity and returns the verdict.
func (r *rollout) reportToGroup(ctx workflow.Context, kind string, retryable bool, reason string) (GroupVerdict, error) {
	rep := GroupReport{
		Set: r.in.Set, Group: r.in.Group, Size: r.in.GroupSize, Budget: r.in.Limits.groupRetries(),
		RolloutID: r.in.RolloutID, Repeat: r.in.Repeat, Attempt: r.in.Attempt,
		Kind: kind, Retryable: retryable, Reason: reason,
	}
	opts := groupReportOptions
	opts.Summary = "report " + kind + " to group " + r.in.Group
	var v GroupVerdict
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), ReportToGroupName, rep).Get(ctx, &v)
	return v, err
}
