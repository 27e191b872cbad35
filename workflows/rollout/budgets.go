package rollout

import (
	"errors"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ErrBudgetExhausted is the error type of a rollout that exhausted one of its
// Limits budgets. The failure is non-retryable, its message names the budget
// and the turn, and its details are a BudgetFailure.
const ErrBudgetExhausted = "BudgetExhausted"

// Budget defaults (the values rollouts had before budgets were settable) and
// bounds.
const (
	DefaultModelCallTimeout = 5 * time.Minute
	DefaultEnvCallTimeout   = 15 * time.Second
	// MinBudget is the smallest timeout or deadline accepted: anything
	// shorter is below a single task round trip and would only fail.
	MinBudget           = time.Second
	MaxCallTimeout      = 24 * time.Hour
	MaxModelCallRetries = 1000
)

// Budget names, as in Limits' JSON and in BudgetFailure.Budget.
const (
	BudgetModelCallRetries = "model_call_retries"
	BudgetDeadline         = "deadline"
)

// BudgetFailure details an ErrBudgetExhausted failure.
type BudgetFailure struct {
	Budget string `json:"budget"`
	Turn   int    `json:"turn"`
}

// Validate checks the budgets; each error names its field.
func (l Limits) Validate() error {
	timeouts := []struct {
		name string
		d    Duration
	}{{"model_call_timeout", l.ModelCallTimeout}, {"env_call_timeout", l.EnvCallTimeout}}
	for _, t := range timeouts {
		if t.d != 0 && (t.d < Duration(MinBudget) || t.d > Duration(MaxCallTimeout)) {
			return fmt.Errorf("limits.%s %s is outside %s..%s (or unset for the default)", t.name, time.Duration(t.d), MinBudget, MaxCallTimeout)
		}
	}
	if l.ModelCallRetries < 0 || l.ModelCallRetries > MaxModelCallRetries {
		return fmt.Errorf("limits.model_call_retries %d is outside 0..%d (0 = unlimited)", l.ModelCallRetries, MaxModelCallRetries)
	}
	if l.Deadline != 0 && l.Deadline < Duration(MinBudget) {
		return fmt.Errorf("limits.deadline %s is below %s (or unset for none)", time.Duration(l.Deadline), MinBudget)
	}
	if g := l.GroupRetries; g != nil && (*g < 0 || *g > MaxGroupRetries) {
		return fmt.Errorf("limits.group_retries %d is outside 0..%d (or unset for %d)", *g, MaxGroupRetries, DefaultGroupRetries)
	}
	return l.validateEnvCalls()
}

func (l Limits) modelCallTimeout() time.Duration {
	if l.ModelCallTimeout == 0 {
		return DefaultModelCallTimeout
	}
	return time.Duration(l.ModelCallTimeout)
}

func (l Limits) envCallTimeout() time.Duration {
	if l.EnvCallTimeout == 0 {
		return DefaultEnvCallTimeout
	}
	return time.Duration(l.EnvCallTimeout)
}

// deadlineLabel names the deadline as the user gave it.
func (l Limits) deadlineLabel() string {
	if l.Deadline != 0 {
		return time.Duration(l.Deadline).String()
	}
	return l.DeadlineAt.UTC().Format(time.RFC3339)
}

// setupBudgets fixes the absolute deadline once, at the first attempt's
// start; later runs carry it in their input.
func (r *rollout) setupBudgets(ctx workflow.Context) {
	l := &r.in.Limits
	if l.Deadline != 0 && l.DeadlineAt.IsZero() {
		l.DeadlineAt = workflow.GetInfo(ctx).WorkflowStartTime.Add(time.Duration(l.Deadline)).UTC()
	}
}

// hasDeadline says whether the run enforces a deadline.
func (r *rollout) hasDeadline() bool { return !r.in.Limits.DeadlineAt.IsZero() }

// turnInProgress is the turn a failure is reported at: the model call being
// made, or the turn whose tool calls (or verification) are running.
func (r *rollout) turnInProgress() int {
	if !r.b.Seeded || r.b.Pending != nil || r.b.Done {
		return r.b.Turn
	}
	return r.b.Turn + 1
}

// activityCtx returns ctx with opts for one activity, bounded by the
// rollout's deadline so that no call outlives it: a start-to-close no longer
// than the time left, and a schedule-to-close of the time left that ends the
// retries too. A deadline already passed fails here, before the call.
func (r *rollout) activityCtx(ctx workflow.Context, opts workflow.ActivityOptions, summary string) (workflow.Context, error) {
	opts.Summary = summary
	if r.hasDeadline() {
		left := r.in.Limits.DeadlineAt.Sub(workflow.Now(ctx))
		if left <= 0 {
			return nil, r.deadlineError(nil)
		}
		opts.ScheduleToCloseTimeout = left
		opts.StartToCloseTimeout = min(opts.StartToCloseTimeout, left)
	}
	return workflow.WithActivityOptions(ctx, opts), nil
}

// modelActivityOptions are the options of a model call under the budgets.
func (r *rollout) modelActivityOptions() workflow.ActivityOptions {
	opts := modelOptions
	policy := *opts.RetryPolicy // a copy: the package default stays untouched
	policy.MaximumAttempts = int32(r.in.Limits.ModelCallRetries)
	opts.RetryPolicy = &policy
	opts.StartToCloseTimeout = r.in.Limits.modelCallTimeout()
	// A call cancelled at a park deadline reports its durable prefix as
	// its cancellation's details; only settleCut waits for them (the
	// flag is not part of the command, and no other path waits on a
	// cancelled call), so recorded histories replay unchanged.
	opts.WaitForCancellation = true
	return opts
}

// envActivityOptions are the options of an environment call under the
// budgets. The heartbeat timeout matters only to a regular activity (a
// local one cannot heartbeat; callEnv drops it): it notices a dead worker in
// seconds, far sooner than the start-to-close timeout would.
func (r *rollout) envActivityOptions() workflow.ActivityOptions {
	opts := envOptions
	opts.StartToCloseTimeout = r.in.Limits.envCallTimeout()
	opts.HeartbeatTimeout = r.in.Limits.envHeartbeatTimeout()
	return opts
}

// budgetError returns the budget failure an activity error amounts to, or
// nil. A retryable failure ends an activity only when its attempts or its
// schedule-to-close (the deadline) ran out; the server says which in the
// retry state, the test environment does not, so the state is used when
// known and the configured budget otherwise.
func (r *rollout) budgetError(ctx workflow.Context, err error, model bool) error {
	if !retryableFailure(err) {
		return nil
	}
	state := enumspb.RETRY_STATE_UNSPECIFIED
	var ae *temporal.ActivityError
	if errors.As(err, &ae) {
		state = ae.RetryState()
	}
	retries := model && r.in.Limits.ModelCallRetries > 0
	var te *temporal.TimeoutError
	deadlineHit := r.hasDeadline() && (state == enumspb.RETRY_STATE_TIMEOUT ||
		errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE ||
		!workflow.Now(ctx).Before(r.in.Limits.DeadlineAt))
	switch {
	case retries && state == enumspb.RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED:
		return r.retriesError(err)
	case deadlineHit:
		return r.deadlineError(err)
	case retries:
		return r.retriesError(err)
	case r.hasDeadline():
		return r.deadlineError(err)
	}
	return nil
}

func (r *rollout) retriesError(cause error) error {
	turn := r.turnInProgress()
	msg := fmt.Sprintf("model-call retries (%d) exhausted at turn %d: %v", r.in.Limits.ModelCallRetries, turn, rootCause(cause))
	return r.budgetFailure(msg, BudgetFailure{Budget: BudgetModelCallRetries, Turn: turn}, cause)
}

func (r *rollout) deadlineError(cause error) error {
	turn := r.turnInProgress()
	msg := fmt.Sprintf("rollout deadline %s passed at turn %d", r.in.Limits.deadlineLabel(), turn)
	if cause != nil {
		msg += ": " + rootCause(cause).Error()
	}
	return r.budgetFailure(msg, BudgetFailure{Budget: BudgetDeadline, Turn: turn}, cause)
}

// budgetFailure is the failure of an exhausted budget. The caller (fail)
// publishes PhaseFailed, unless the rollout's group retries it.
func (r *rollout) budgetFailure(msg string, details BudgetFailure, cause error) error {
	r.logger.Warn("budget exhausted", "budget", details.Budget, "turn", details.Turn, "error", msg)
	return temporal.NewNonRetryableApplicationError(msg, ErrBudgetExhausted, cause, details)
}

// isBudget says whether err is the failure of the named budget.
func isBudget(err error, budget string) bool {
	var ae *temporal.ApplicationError
	var details BudgetFailure
	return errors.As(err, &ae) && ae.Type() == ErrBudgetExhausted &&
		ae.Details(&details) == nil && details.Budget == budget
}

// markFailed publishes PhaseFailed, so a failed rollout is found with
// RolloutPhase="failed" rather than by the phase it failed in. The reason
// stays in the failure, not in a search attribute of its own: a server
// without that attribute registered fails the workflow task on the upsert,
// so the rollout would retry the task forever instead of failing.
func (r *rollout) markFailed(ctx workflow.Context) {
	r.setPhase(ctx, PhaseFailed)
}

// retryableFailure says whether err is an activity failure its retry policy
// would retry: not cancelled, not non-retryable. A regular activity's
// failure is an ActivityError; a local activity's comes unwrapped, as the
// application or timeout error itself.
func retryableFailure(err error) bool {
	var ae *temporal.ActivityError
	var te *temporal.TimeoutError
	var app *temporal.ApplicationError
	if !errors.As(err, &ae) && !errors.As(err, &te) && !errors.As(err, &app) {
		return false
	}
	var ce *temporal.CanceledError
	if errors.As(err, &ce) {
		return false
	}
	if errors.As(err, &app) {
		return !app.NonRetryable() &&
			!slices.Contains(modelOptions.RetryPolicy.NonRetryableErrorTypes, app.Type()) &&
			!slices.Contains(envOptions.RetryPolicy.NonRetryableErrorTypes, app.Type())
	}
	return true
}

// rootCause is the activity's own failure, without the "activity error
// (type: …, scheduledEventID: …)" wrapping; a timeout says which.
func rootCause(err error) error {
	var te *temporal.TimeoutError
	if errors.As(err, &te) {
		return fmt.Errorf("timed out (%s)", te.TimeoutType())
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
