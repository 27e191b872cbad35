package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/envs"
	"github.com/turnstile-rl/turnstile/participants/protocol"
)

// Defaults and bounds of a rollout.
const (
	DefaultMaxTurns = 16
	MaxMaxTurns     = 10000
)

// Error types a Rollout fails with.
const (
	// ErrInvalidInput: the input cannot start a rollout.
	ErrInvalidInput = "InvalidRolloutInput"
	// ErrFenced: a higher attempt of this rollout is installed; this one stops.
	ErrFenced = "AttemptFenced"
	// ErrNotParked: a park update ended because its checkpoint was resumed
	// (aborted) before the rollout reached a boundary.
	ErrNotParked = "NotParked"
)

// Activity timeouts. A worker that dies mid-activity is detected by the
// heartbeat timeout (model calls, and environment calls run as regular
// activities) or, for environment calls run as local activities, by the
// workflow task timeout; then the call is retried on another worker.
var (
	modelOptions = workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			NonRetryableErrorTypes: []string{ErrModelRequest},
		},
	}
	envOptions = workflow.ActivityOptions{
		StartToCloseTimeout: 15 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    500 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			NonRetryableErrorTypes: []string{
				ErrStaleAttempt, ErrParked, ErrEnvironment,
			},
		},
	}
	// parkedRetry is how long a rollout waits before re-sending a request the
	// environment answered "parked" (admission closed for a checkpoint).
	parkedRetry = time.Second
)

// Rollout runs one attempt of a rollout: seed the environment, then model call
// → one environment operation per tool call (or one step, gym style), until
// the model answers without tool calls, the episode terminates or the turn
// limit; then verify. Each completed activity leaves a boundary where the
// rollout may park for a checkpoint or continue as new.
func Rollout(ctx workflow.Context, in Input) (Result, error) {
	r, err := setupRollout(ctx, in)
	if err != nil {
		(&rollout{in: in, logger: workflow.GetLogger(ctx)}).notifyFailed(ctx, err)
		return Result{}, err
	}
	res, err := r.run(ctx)
	if err != nil {
		r.reportCanceled(ctx, err)
		r.notifyFailed(ctx, err)
	}
	return res, err
}

// rollout is the state of one run.
type rollout struct {
	in     Input
	b      Boundary
	phase  Phase
	logger log.Logger

	park   *ParkRequest // a checkpoint asked to park; nil when none
	parked bool         // the main loop is parked at a boundary
	// released are the checkpoints that released this run: a late park
	// signal of one is ignored (see validateParkSignal).
	released map[string]bool
	result   *Result
	acked    bool
	// pub is what readers see of the run (its search attributes).
	pub published
	// stored is the receipt digest of the held result once StoreResult
	// stored it (Input.ResultInStore); "" before, or when it failed.
	stored string
	// groups is set in runs of a group's rollouts that report to its
	// ledger.
	groups bool
	// notified: the run told its set's admission it stopped working (see
	// notifyAdmission).
	notified bool
}

// validate checks the input; a bad input fails the run before any side effect.
func (in *Input) validate() error {
	switch {
	case in.RolloutID == "":
		return errors.New("rollout_id is required")
	case in.Attempt < 0:
		return fmt.Errorf("attempt %d is negative", in.Attempt)
	case in.Env.Name == "":
		return errors.New("env.name is required")
	case in.Policy.Model == "":
		return errors.New("policy.model is required")
	case in.Limits.MaxTurns < 0 || in.Limits.MaxTurns > MaxMaxTurns:
		return fmt.Errorf("limits.max_turns %d is outside 0..%d", in.Limits.MaxTurns, MaxMaxTurns)
	}
	if err := in.Limits.Validate(); err != nil {
		return err
	}
	if err := in.Sampling.Validate(); err != nil {
		return err
	}
	if err := in.Policy.validateContinue(); err != nil {
		return err
	}
	if err := in.validateGroup(); err != nil {
		return err
	}
	if err := in.validateProgressEvery(); err != nil {
		return err
	}
	if b := in.Resume; b != nil {
		switch {
		case b.RolloutID != in.RolloutID:
			return fmt.Errorf("resume boundary is of rollout %q, not %q", b.RolloutID, in.RolloutID)
		case b.Attempt > in.Attempt:
			return fmt.Errorf("resume boundary is of attempt %d, after attempt %d", b.Attempt, in.Attempt)
		case !b.Seeded:
			return errors.New("resume boundary was never seeded")
		case b.Pending != nil && (b.Cursor < 0 || b.Cursor > len(b.Pending.ToolCalls)):
			return fmt.Errorf("resume boundary cursor %d is outside its %d tool calls", b.Cursor, len(b.Pending.ToolCalls))
		case b.Partial != nil && (b.Partial.Turn != b.Turn+1 || b.Partial.Validate() != nil):
			return fmt.Errorf("resume boundary's partial generation is not a valid prefix of turn %d", b.Turn+1)
		}
	}
	if c := in.Completed; c != nil {
		if c.RolloutID != in.RolloutID || c.Receipt == nil {
			return errors.New("completed result must be of this rollout and carry its receipt")
		}
		want, err := NewReceipt(*c)
		if err != nil || want != *c.Receipt {
			return errors.New("completed result does not match its receipt")
		}
	}
	return nil
}

func setupRollout(ctx workflow.Context, in Input) (*rollout, error) {
	if err := in.validate(); err != nil {
		return nil, temporal.NewNonRetryableApplicationError("invalid rollout input: "+err.Error(), ErrInvalidInput, nil)
	}
	if in.Limits.MaxTurns == 0 {
		in.Limits.MaxTurns = DefaultMaxTurns
	}
	r := &rollout{in: in, phase: PhaseSeeding}
	if in.Resume != nil {
		r.b = *in.Resume
		r.in.Resume = nil
	}
	r.b.RolloutID, r.b.Attempt = in.RolloutID, in.Attempt
	if in.HoldFor != "" {
		r.park = &ParkRequest{CheckpointID: in.HoldFor}
	}
	r.logger = log.With(workflow.GetLogger(ctx), "rollout", in.RolloutID, "attempt", in.Attempt)
	r.setupBudgets(ctx)
	r.setupGroups()
	r.setupDetails()
	r.setupPublished(ctx)
	r.setupChainStart(ctx)
	if err := r.registerHandlers(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *rollout) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryBoundary, func() (Boundary, error) { return r.b, nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (Status, error) {
		return Status{Phase: r.phase, Boundary: r.b, Result: r.result}, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdatePark, r.onPark, workflow.UpdateHandlerOptions{
		Validator:   r.validatePark,
		Description: "park at the next boundary and return the boundary record",
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateResume, r.onResume, workflow.UpdateHandlerOptions{
		Validator:   r.validateResume,
		Description: "release a rollout parked for a checkpoint",
	}); err != nil {
		return err
	}
	if err := workflow.SetQueryHandlerWithOptions(ctx, QueryParkRecord, r.parkRecord, workflow.QueryHandlerOptions{
		Description: "the record of a rollout parked for the checkpoint named",
	}); err != nil {
		return err
	}
	r.receiveSignals(ctx)
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateAcknowledge, r.onAck, workflow.UpdateHandlerOptions{
		Validator:   r.validateAck,
		Description: "release a completed result held for acknowledgement",
	})
}

// receiveSignals applies the park and resume signals as the updates would.
// Handling a signal only changes r.park; the commands that follow are those
// an update would have caused, so no version is needed and runs started
// before the signals existed answer them too.
func (r *rollout) receiveSignals(ctx workflow.Context) {
	parkCh := workflow.GetSignalChannel(ctx, SignalPark)
	resumeCh := workflow.GetSignalChannel(ctx, SignalResume)
	workflow.Go(ctx, func(ctx workflow.Context) {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(parkCh, func(c workflow.ReceiveChannel, _ bool) {
			var req ParkRequest
			c.Receive(ctx, &req)
			if err := r.validateParkSignal(ctx, req); err != nil {
				r.logger.Warn("park signal ignored", "checkpoint", req.CheckpointID, "error", err)
				return
			}
			r.requestPark(req)
		})
		sel.AddReceive(resumeCh, func(c workflow.ReceiveChannel, _ bool) {
			var req ResumeRequest
			c.Receive(ctx, &req)
			if err := r.validateResume(req); err != nil {
				r.logger.Warn("resume signal ignored", "checkpoint", req.CheckpointID, "error", err)
				return
			}
			r.release(req.CheckpointID)
		})
		for ctx.Err() == nil {
			sel.Select(ctx)
		}
	})
}

// staleParkAfter is how long past its deadline a park signal is taken as
// late: a checkpoint's cut ends by its deadline plus its settle time (30s)
// or aborts, so a park arriving after that belongs to a finished checkpoint.
const staleParkAfter = time.Minute

// validateParkSignal is validatePark, and refuses a late park signal: one
// of a checkpoint that already released this run, or past its deadline. A
// park update is deduplicated by its id, so a retried one after the resume
// parks nothing; a signal has no id, and a late one would hold the rollout
// for a checkpoint that is over.
func (r *rollout) validateParkSignal(ctx workflow.Context, req ParkRequest) error {
	if err := r.validatePark(req); err != nil {
		return err
	}
	switch {
	case r.released[req.CheckpointID]:
		return fmt.Errorf("checkpoint %q already released this rollout", req.CheckpointID)
	case !req.Deadline.IsZero() && workflow.Now(ctx).After(req.Deadline.Add(staleParkAfter)) &&
		(req.LeaseUntil.IsZero() || r.park == nil):
		return fmt.Errorf("checkpoint %q's deadline %s has passed", req.CheckpointID, req.Deadline.Format(time.RFC3339))
	case !req.LeaseUntil.IsZero() && !workflow.Now(ctx).Before(req.LeaseUntil):
		return fmt.Errorf("checkpoint %q's lease ended at %s", req.CheckpointID, req.LeaseUntil.Format(time.RFC3339))
	}
	return nil
}

// release ends the hold of checkpointID and remembers it, so a late park
// signal of the same checkpoint is ignored.
func (r *rollout) release(checkpointID string) {
	r.park = nil
	if r.released == nil {
		r.released = map[string]bool{}
	}
	r.released[checkpointID] = true
}

// parkRecord answers QueryParkRecord.
func (r *rollout) parkRecord(checkpointID string) (ParkRecord, error) {
	switch {
	case r.park == nil:
		return ParkRecord{}, fmt.Errorf("%s: no park requested for checkpoint %q", NotParkedYet, checkpointID)
	case r.park.CheckpointID != checkpointID:
		return ParkRecord{}, fmt.Errorf("%s: rollout is held for checkpoint %q", HeldForOther, r.park.CheckpointID)
	case !r.parked && r.result == nil:
		return ParkRecord{}, fmt.Errorf("%s: turn %d, phase %s", NotParkedYet, r.b.Turn, r.phase)
	}
	return r.record(checkpointID), nil
}

// validatePark rejects (without writing history) a park for a second
// checkpoint while one holds the rollout.
func (r *rollout) validatePark(req ParkRequest) error {
	if req.CheckpointID == "" {
		return errors.New("checkpoint_id is required")
	}
	if r.park != nil && r.park.CheckpointID != req.CheckpointID {
		return fmt.Errorf("rollout is held for checkpoint %q", r.park.CheckpointID)
	}
	return nil
}

// requestPark holds the rollout for req's checkpoint (validated).
func (r *rollout) requestPark(req ParkRequest) {
	switch {
	case r.park == nil:
		r.park = &req
	case r.park.Deadline.IsZero():
		r.park.Deadline = req.Deadline // a held restore run learns its deadline
	case !r.park.LeaseUntil.IsZero() && req.LeaseUntil.After(r.park.LeaseUntil):
		r.park.LeaseUntil = req.LeaseUntil // the checkpoint renewed its lease
	}
}

func (r *rollout) onPark(ctx workflow.Context, req ParkRequest) (ParkRecord, error) {
	r.requestPark(req)
	// A completed rollout has no next boundary: its held result is its record.
	// A resume (the abort of a checkpoint) that comes before the rollout
	// reached a boundary ends the wait too, so the update never dangles.
	if err := workflow.Await(ctx, func() bool { return r.parked || r.result != nil || r.park == nil }); err != nil {
		return ParkRecord{}, err
	}
	if !r.parked && r.result == nil {
		return ParkRecord{}, temporal.NewApplicationError(
			fmt.Sprintf("checkpoint %s was resumed before the rollout reached a boundary", req.CheckpointID), ErrNotParked)
	}
	return r.record(req.CheckpointID), nil
}

func (r *rollout) record(checkpointID string) ParkRecord {
	in := r.in
	in.Resume, in.HoldFor = nil, ""
	return ParkRecord{
		CheckpointID: checkpointID, Set: r.in.Set, Input: in,
		Boundary: r.b, Phase: r.phase, Result: r.result,
	}
}

func (r *rollout) validateResume(req ResumeRequest) error {
	if req.CheckpointID == "" {
		return errors.New("checkpoint_id is required")
	}
	if r.park != nil && r.park.CheckpointID != req.CheckpointID {
		return fmt.Errorf("rollout is held for checkpoint %q, not %q", r.park.CheckpointID, req.CheckpointID)
	}
	return nil
}

// onResume releases the rollout; resuming a rollout that is not held is a
// no-op, so a retried resume is harmless.
func (r *rollout) onResume(_ workflow.Context, req ResumeRequest) error {
	r.release(req.CheckpointID)
	return nil
}

func (r *rollout) validateAck(req AckRequest) error {
	if r.result == nil || r.result.Receipt == nil {
		return errors.New("rollout has no completed result to acknowledge")
	}
	if *r.result.Receipt != req.Receipt {
		return fmt.Errorf("receipt %+v does not match the result's %+v", req.Receipt, *r.result.Receipt)
	}
	return nil
}

func (r *rollout) onAck(_ workflow.Context, _ AckRequest) error {
	r.acked = true
	return nil
}

func (r *rollout) run(ctx workflow.Context) (Result, error) {
	if r.in.Completed != nil {
		// A restored result: its group may not have heard of it (a ledger
		// lost with the server); a report heard before changes nothing.
		r.reportDone(ctx)
		return r.offer(ctx, *r.in.Completed)
	}
	r.reportRestored(ctx)
	if err := r.boundary(ctx); err != nil {
		return Result{}, err
	}
	if !r.b.Seeded {
		if err := r.seed(ctx); err != nil {
			return Result{}, err
		}
	}
	for !r.b.Done {
		var err error
		switch {
		case r.b.Pending != nil && r.b.Cursor < len(r.b.Pending.ToolCalls):
			err = r.operate(ctx)
		case r.b.Turn >= r.in.Limits.MaxTurns:
			// At the limit: stop without generating an extra action.
			r.b.Truncated, r.b.Done = true, true
		default:
			err = r.callModel(ctx)
		}
		if err != nil {
			return Result{}, err
		}
		if err := r.boundary(ctx); err != nil {
			return Result{}, err
		}
		if !r.b.Done && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return Result{}, r.continueAsNew(ctx)
		}
	}
	return r.finish(ctx)
}

// boundary is where the rollout may park: it publishes its position and, when
// a checkpoint asked, waits here until resumed. A rollout held already (a
// restored run) publishes only that it is parked.
func (r *rollout) boundary(ctx workflow.Context) error {
	if r.park == nil {
		r.advancePhase(ctx, r.nextPhase())
		return nil
	}
	r.parked = true
	r.setPhase(ctx, PhaseParked)
	r.logger.Info("parked", "checkpoint", r.park.CheckpointID, "turn", r.b.Turn)
	if err := r.awaitRelease(ctx); err != nil {
		return err
	}
	r.parked = false
	r.logger.Info("resumed", "turn", r.b.Turn)
	r.advancePhase(ctx, r.nextPhase())
	return nil
}

// awaitRelease waits until the rollout's checkpoint releases it, or its
// park lease expires. A park with no lease waits for the release alone and
// starts no timer; one with a lease starts one timer, restarted only when
// the lease is renewed, and cancelled by the release.
func (r *rollout) awaitRelease(ctx workflow.Context) error {
	for r.park != nil {
		held, until := r.park, r.park.LeaseUntil
		changed := func() bool { return r.park != held || !r.park.LeaseUntil.Equal(until) }
		if until.IsZero() {
			if err := workflow.Await(ctx, changed); err != nil {
				return err
			}
			continue
		}
		if wait := until.Sub(workflow.Now(ctx)); wait > 0 {
			ok, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
				Timeout: wait, TimerOptions: workflow.TimerOptions{Summary: "park lease"},
			}, changed)
			if err != nil {
				return err
			}
			if ok {
				continue
			}
		}
		r.logger.Warn("park lease expired with no resume; resuming", "checkpoint", held.CheckpointID,
			"lease_until", until.Format(time.RFC3339))
		r.release(held.CheckpointID)
	}
	return nil
}

func (r *rollout) nextPhase() Phase {
	switch {
	case !r.b.Seeded:
		return PhaseSeeding
	case r.b.Done:
		return PhaseVerifying
	case r.b.Pending != nil:
		return PhaseEnvironment
	default:
		return PhaseModel
	}
}

func (r *rollout) seed(ctx workflow.Context) error {
	in := StartEnvironmentInput{
		RolloutID: r.in.RolloutID, Attempt: r.in.Attempt, Env: r.in.Env, Seed: r.in.Seed, Task: r.in.Task,
	}
	if g := r.in.Retry; g != nil && g.Attempt == r.in.Attempt {
		in.Retry = g // a restore's later attempt is no group retry
	}
	if r.in.Set != "" {
		in.Fence = &SetFenceCheck{Set: r.in.Set, StartedAt: *r.in.StartedAt}
	}
	var res StartEnvironmentResult
	err := r.retryParked(ctx, func() error {
		return r.callEnv(ctx, StartEnvironmentName, "seed "+r.in.Env.Name, in, &res)
	})
	if err != nil {
		return r.fail(ctx, err, "seed environment", false)
	}
	r.b.Head, r.b.Tools, r.b.Revision = res.Head, res.Tools, res.Revision
	r.b.Style, r.b.EnvMode, r.b.Seeded = res.Style, res.Mode, true
	return r.boundary(ctx)
}

// callModel asks the policy for the next message. When a checkpoint's
// deadline passes while the model is still answering, the call is cancelled
// and the rollout parks at its previous boundary: a slow model never fails a
// checkpoint. The call stops at its next durable token prefix (when it keeps
// one) and the boundary keeps it, so after a resume or a restore the call
// continues from there (settleCut); it is made again with the same id.
func (r *rollout) callModel(ctx workflow.Context) error {
	turn := r.b.Turn + 1
	in := CallModelInput{
		RolloutID: r.in.RolloutID, Attempt: r.in.Attempt, Turn: turn,
		Head: r.b.Head, Tools: r.b.Tools, Style: r.b.Style,
		Policy: r.in.Policy, Seed: r.in.Seed, Sampling: r.in.Sampling, Parent: r.b.LastCall,
	}
	for {
		if p := r.b.Partial; p != nil && p.Turn == turn {
			in.Prefix = p
		}
		callCtx, cancel := workflow.WithCancel(ctx)
		actx, err := r.activityCtx(callCtx, r.modelActivityOptions(), fmt.Sprintf("model turn %d", turn))
		if err != nil {
			cancel()
			return r.fail(ctx, err, fmt.Sprintf("model call of turn %d", turn), true)
		}
		fut := workflow.ExecuteActivity(actx, CallModelName, in)

		expired, err := r.awaitAnswerOrDeadline(ctx, fut)
		if err != nil {
			cancel()
			return err
		}
		if !expired {
			var res CallModelResult
			err := fut.Get(ctx, &res)
			cancel()
			if err != nil {
				return r.fail(ctx, err, fmt.Sprintf("model call of turn %d", turn), true)
			}
			r.commitAnswer(turn, res)
			return nil
		}
		// The deadline passed: cancel the call, let it settle, and park at
		// the previous boundary with what it made durable.
		cancel()
		answered, err := r.settleCut(ctx, fut, turn)
		if err != nil {
			return err
		}
		if answered {
			return nil // it finished before it saw the cancellation
		}
		r.logger.Info("model call cancelled at the park deadline", "turn", turn, "prefix", r.b.Partial != nil)
		if err := r.boundary(ctx); err != nil {
			return err
		}
	}
}

// commitAnswer records the model's answer of turn at the boundary.
func (r *rollout) commitAnswer(turn int, res CallModelResult) {
	r.b.Turn = turn
	r.b.Head = res.Head
	r.b.Usage = r.b.Usage.Add(res.Usage)
	r.b.Lineage = append(r.b.Lineage, lineageEntry(res))
	r.b.LastCall = res.CallID
	r.b.Partial = nil
	if len(res.ToolCalls) == 0 {
		r.b.Done = true
	} else {
		pending := res.PendingCall
		r.b.Pending, r.b.Cursor = &pending, 0
	}
}

// awaitAnswerOrDeadline waits for the model's answer; when a park request
// with a deadline arrives meanwhile, it also waits for that deadline and
// reports whether the deadline came first.
func (r *rollout) awaitAnswerOrDeadline(ctx workflow.Context, answer workflow.Future) (expired bool, err error) {
	var deadline workflow.Future
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	for {
		err := workflow.Await(ctx, func() bool {
			return answer.IsReady() ||
				(deadline == nil && r.park != nil && !r.park.Deadline.IsZero()) ||
				(deadline != nil && deadline.IsReady())
		})
		switch {
		case err != nil:
			return false, err
		case answer.IsReady():
			return false, nil
		case deadline == nil:
			wait := r.park.Deadline.Sub(workflow.Now(ctx))
			if wait < 0 {
				wait = 0
			}
			deadline = workflow.NewTimerWithOptions(timerCtx, wait, workflow.TimerOptions{Summary: "park deadline"})
		default:
			return true, nil
		}
	}
}

// operate applies the pending tool call at the cursor.
func (r *rollout) operate(ctx workflow.Context) error {
	call := r.b.Pending.ToolCalls[r.b.Cursor]
	in := OperateEnvironmentInput{
		RolloutID: r.in.RolloutID, Attempt: r.in.Attempt,
		RequestID:        protocol.OperateRequestID(r.in.RolloutID, r.b.Turn, r.b.Cursor),
		ExpectedRevision: r.b.Revision, Env: r.in.Env, Style: r.b.Style, Head: r.b.Head, Call: call,
	}
	var res OperateEnvironmentResult
	err := r.retryParked(ctx, func() error {
		summary := fmt.Sprintf("%s turn %d call %d", call.Name, r.b.Turn, r.b.Cursor)
		return r.callEnv(ctx, OperateEnvironmentName, summary, in, &res)
	})
	if err != nil {
		return r.fail(ctx, err, fmt.Sprintf("environment call %s", in.RequestID), false)
	}
	r.b.Head, r.b.Revision = res.Head, res.Revision
	r.b.Reward += res.Reward
	r.recordStep(res.Reward)
	r.b.Cursor++
	if r.b.Cursor == len(r.b.Pending.ToolCalls) {
		r.b.Pending, r.b.Cursor = nil, 0
	}
	if res.Terminated || res.Truncated {
		r.b.Terminated, r.b.Truncated, r.b.Done = res.Terminated, res.Truncated, true
		r.b.Pending, r.b.Cursor = nil, 0
	}
	return nil
}

// retryParked runs call until the environment stops answering "parked". The
// refused request changed nothing, so the rollout is still at its boundary:
// it may park there for the checkpoint that closed admission, and re-sends
// the same request (same request id) afterwards. No failure is counted.
func (r *rollout) retryParked(ctx workflow.Context, call func() error) error {
	for {
		err := call()
		if !isType(err, ErrParked) {
			return err
		}
		r.logger.Info("environment parked the request; waiting")
		r.publishDeferred(ctx) // it waits on the environment now: say so
		if _, werr := workflow.AwaitWithTimeout(ctx, parkedRetry, func() bool { return r.park != nil }); werr != nil {
			return werr
		}
		if err := r.boundary(ctx); err != nil {
			return err
		}
	}
}

// fail turns an activity error into the rollout's failure: an exhausted
// budget becomes a budget failure, a stale attempt a fencing failure that
// says so. model says whether a model call failed. A member of a group
// reports the failure to its group, which may retry it as a new attempt
// (fail then returns the continue-as-new); otherwise the rollout is marked
// failed.
func (r *rollout) fail(ctx workflow.Context, err error, what string, model bool) error {
	ferr, fenced := r.failure(ctx, err, what, model)
	if r.groups && !fenced && !temporal.IsCanceledError(err) {
		return r.groupFailure(ctx, ferr, failureReason(err, ferr, what), !model && environmentFailure(err, ferr))
	}
	r.markFailed(ctx)
	return ferr
}

// failure is the rollout failure an activity error amounts to, and whether
// it is a fencing failure (a newer attempt of this rollout is installed).
func (r *rollout) failure(ctx workflow.Context, err error, what string, model bool) (error, bool) {
	if isType(err, ErrFencedByRestore) {
		r.logger.Warn("fenced by a restore of the set", "error", err)
		return temporal.NewNonRetryableApplicationError(applicationMessage(err), ErrFencedByRestore, nil), true
	}
	if isType(err, ErrBudgetExhausted) {
		return err, false // activityCtx refused the call: the deadline had passed
	}
	if be := r.budgetError(ctx, err, model); be != nil {
		return be, false
	}
	if isType(err, ErrStaleAttempt) {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("attempt %d of %s is fenced off by a newer attempt: %v", r.in.Attempt, r.in.RolloutID, err),
			ErrFenced, err), true
	}
	return fmt.Errorf("%s: %w", what, err), false
}

func (r *rollout) finish(ctx workflow.Context) (Result, error) {
	in := VerifyInput{
		RolloutID: r.in.RolloutID, Attempt: r.in.Attempt,
		RequestID: protocol.VerifyRequestID(r.in.RolloutID), ExpectedRevision: r.b.Revision, Env: r.in.Env,
		StoreDetails: true,
	}
	var v VerifyResult
	err := r.retryParked(ctx, func() error {
		return r.callEnv(ctx, VerifyName, "verify", in, &v)
	})
	if err != nil {
		return Result{}, r.fail(ctx, err, "verify", false)
	}
	reward := v.Reward
	if r.b.Style == envs.StyleGym {
		// Gym episodes score by their accumulated dense reward.
		reward = r.b.Reward
	}
	res := r.withDetails(Result{
		RolloutID: r.in.RolloutID, Set: r.in.Set, Env: r.in.Env.Name, Attempt: r.in.Attempt,
		Reward: reward, Turns: r.b.Turn, Usage: r.b.Usage, Head: r.b.Head, Lineage: r.b.Lineage,
		Terminated: r.b.Terminated, Truncated: r.b.Truncated,
	}, v)
	receipt, err := NewReceipt(res)
	if err != nil {
		return Result{}, err
	}
	res.Receipt = &receipt
	r.reportDone(ctx)
	return r.offer(ctx, res)
}

// offer holds the result until acknowledged (when the set asks for that) and
// completes the run with it.
func (r *rollout) offer(ctx workflow.Context, res Result) (Result, error) {
	r.result = &res
	r.b.Done = true
	if r.in.RequireAck {
		r.storeResult(ctx, res)
		r.setPhase(ctx, PhaseAwaitingAck)
		// A held result works no more: its slot goes to the next rollout.
		r.notifyAdmission(ctx, OutcomeHeld)
		if err := workflow.Await(ctx, func() bool { return r.acked }); err != nil {
			return Result{}, err
		}
	}
	r.setPhase(ctx, PhaseCompleted)
	r.notifyAdmission(ctx, OutcomeCompleted)
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return Result{}, err
	}
	return res, nil
}

// continueAsNew starts a fresh run of the same attempt from this boundary,
// keeping the history of each run bounded.
func (r *rollout) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	// The next run starts with this run's search attributes: publish the
	// position it starts from.
	r.publishPosition(ctx)
	next := r.in
	b := r.b
	// The run was released (it reached this boundary unparked): the next
	// run must not wait again for a resume already given.
	next.Resume, next.HoldFor = &b, ""
	r.logger.Info("continuing as new", "turn", r.b.Turn)
	return workflow.NewContinueAsNewError(ctx, WorkflowName, next)
}

// NewReceipt computes the receipt of a result: the SHA-256 of its canonical
// JSON without the receipt (ResultJSON).
func NewReceipt(res Result) (Receipt, error) {
	data, err := ResultJSON(res)
	if err != nil {
		return Receipt{}, err
	}
	sum := sha256.Sum256(data)
	return Receipt{RolloutID: res.RolloutID, Attempt: res.Attempt, SHA256: hex.EncodeToString(sum[:])}, nil
}

// ResultJSON is res's canonical JSON without its receipt: what its
// receipt's SHA256 digests, and what a held result is stored as (under
// that digest) in the transcript store.
func ResultJSON(res Result) ([]byte, error) {
	res.Receipt = nil
	data, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("encode result of rollout %s: %w", res.RolloutID, err)
	}
	return data, nil
}

func isType(err error, typ string) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && ae.Type() == typ
}

var (
	rolloutIDKey      = temporal.NewSearchAttributeKeyKeyword(SARolloutID)
	rolloutSetKey     = temporal.NewSearchAttributeKeyKeyword(SARolloutSet)
	rolloutAttemptKey = temporal.NewSearchAttributeKeyInt64(SARolloutAttempt)
	rolloutTurnKey    = temporal.NewSearchAttributeKeyInt64(SARolloutTurn)
	rolloutPhaseKey   = temporal.NewSearchAttributeKeyKeyword(SARolloutPhase)
	checkpointIDKey   = temporal.NewSearchAttributeKeyKeyword(SACheckpointID)
)
