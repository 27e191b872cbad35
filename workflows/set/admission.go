package set

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ErrInvalidAdmission: the admission's input cannot run.
const ErrInvalidAdmission = "InvalidAdmissionInput"

// Timing and size of admission work.
const (
	// reconcileAfter is how long the admission waits without a notice,
	// while it believes rollouts run, before it asks Temporal which of
	// them stopped working (a terminated run sends no notice).
	reconcileAfter = time.Minute
	// maxAdmitPerActivity bounds the rollouts one AdmitRollouts starts.
	maxAdmitPerActivity = 512
)

var (
	// storeOptions: the batch goes to the transcript store; a failure
	// fails the update, and the submitter sends the batch again.
	storeOptions = workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 500 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 5 * time.Second,
			MaximumAttempts: 5, NonRetryableErrorTypes: []string{rollout.ErrBadInput},
		},
	}
	// admitOptions: starts are idempotent by workflow id and retried
	// until Temporal answers; a bad input (a batch the store lost) is not.
	admitOptions = workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			NonRetryableErrorTypes: []string{rollout.ErrBadInput},
		},
	}
	// reconcileOptions: a reconciliation that fails is tried again at the
	// next quiet period.
	reconcileOptions = workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 3, NonRetryableErrorTypes: []string{rollout.ErrBadInput}},
	}
)

// validate checks an admission's input: a bad one fails the run at once.
func (in AdmissionInput) validate() error {
	if err := rollout.ValidateSet(in.Set); err != nil {
		return err
	}
	switch {
	case in.TaskQueue == "":
		return errors.New("task_queue is required")
	case in.Batches < 1 || in.Batches > MaxBatches:
		return fmt.Errorf("batches %d: want 1..%d", in.Batches, MaxBatches)
	case in.Received < 0 || in.Received > in.Batches:
		return fmt.Errorf("received %d: want 0..%d (the batches)", in.Received, in.Batches)
	case in.Total < 1 || in.Enqueued < 0 || in.Enqueued > in.Total:
		return fmt.Errorf("total %d, enqueued %d: want 1 rollout or more, enqueued at most the total", in.Total, in.Enqueued)
	}
	if err := ValidateMaxInFlight("max_in_flight", in.MaxInFlight); err != nil {
		return err
	}
	for i, b := range in.Queue {
		if b.Ref == "" || b.Count < 1 || b.Unit < 1 || b.Admitted < 0 || b.Admitted > b.Count || len(b.EnvOf) != b.Count {
			return fmt.Errorf("queue[%d]: batch %q of %d rollouts (%d admitted, unit %d, %d environments) is malformed", i, b.Ref, b.Count, b.Admitted, b.Unit, len(b.EnvOf))
		}
	}
	return nil
}

// admission is the state of one SetAdmission run.
type admission struct {
	in      AdmissionInput
	running map[string]int
	logger  log.Logger

	finishedCh, releaseCh workflow.ReceiveChannel
	// storing: an enqueue is storing its batch. admitting: an AdmitRollouts
	// is in flight, for pending rollouts. early are notices of rollouts
	// the admitting activity has not reported yet (a rollout that finished
	// before its start was reported).
	storing   bool
	admitting bool
	pending   int
	early     map[string]int
	// dirty: something changed that may let a rollout in. heard: a notice
	// came since the reconcile timer was set.
	dirty, heard bool
	details      string
}

// SetAdmission runs a set's rollouts at most in.MaxInFlight at once, in the
// order of their submission, a group's rollouts together: it starts queued
// rollouts as others report they stopped working, until every batch of the
// submission was received, admitted and has stopped working. A checkpoint
// holds it (UpdateHold) and records what waits; a restore starts a new run
// from the checkpoint's queue.
func SetAdmission(ctx workflow.Context, in AdmissionInput) (AdmissionResult, error) {
	if err := in.validate(); err != nil {
		return AdmissionResult{}, temporal.NewNonRetryableApplicationError("invalid admission input: "+err.Error(), ErrInvalidAdmission, nil)
	}
	a := &admission{
		in: in, running: map[string]int{}, early: map[string]int{},
		logger:     log.With(workflow.GetLogger(ctx), "set", in.Set),
		finishedCh: workflow.GetSignalChannel(ctx, SignalFinished),
		releaseCh:  workflow.GetSignalChannel(ctx, SignalRelease),
	}
	for _, r := range in.Running {
		a.running[r.RolloutID] = r.Attempt
	}
	a.in.Running = nil
	if err := a.register(ctx); err != nil {
		return AdmissionResult{}, err
	}
	return a.run(ctx)
}

func (a *admission) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (AdmissionStatus, error) { return a.status(), nil }); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateEnqueue, a.onEnqueue, workflow.UpdateHandlerOptions{
		Validator: a.validateEnqueue, Description: "queue one batch of the set's submission",
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateMaxInFlight, a.onMaxInFlight, workflow.UpdateHandlerOptions{
		Validator:   func(r MaxInFlightRequest) error { return ValidateMaxInFlight("max_in_flight", r.MaxInFlight) },
		Description: "change how many of the set's rollouts run at once",
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateHold, a.onHold, workflow.UpdateHandlerOptions{
		Validator: a.validateHold, Description: "stop admitting for a checkpoint and answer what runs and what waits",
	})
}

// run admits rollouts until the set is done, or continues as new.
func (a *admission) run(ctx workflow.Context) (AdmissionResult, error) {
	var admit workflow.Future
	var timer workflow.Future
	for {
		a.drain(ctx)
		if admit != nil && admit.IsReady() {
			a.admitted(ctx, admit)
			admit = nil
		}
		if admit == nil && a.in.Hold == "" {
			if slices, n := a.plan(); n > 0 {
				admit = a.admit(ctx, slices, n)
				continue
			}
		}
		a.describe(ctx)
		if admit == nil && a.done() {
			return AdmissionResult{Set: a.in.Set, Total: a.in.Total, Counts: a.in.Counts}, nil
		}
		if admit == nil && !a.storing && workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return AdmissionResult{}, a.continueAsNew(ctx)
		}
		if timer == nil && admit == nil && len(a.running) > 0 {
			timer = workflow.NewTimerWithOptions(ctx, reconcileAfter, workflow.TimerOptions{Summary: "reconcile if no rollout reports"})
			a.heard = false
		}
		err := workflow.Await(ctx, func() bool {
			return a.dirty || a.finishedCh.Len() > 0 || a.releaseCh.Len() > 0 ||
				(admit != nil && admit.IsReady()) || (timer != nil && timer.IsReady()) ||
				(admit == nil && !a.storing && workflow.GetInfo(ctx).GetContinueAsNewSuggested())
		})
		if err != nil {
			return AdmissionResult{}, err
		}
		a.dirty = false
		if timer != nil && timer.IsReady() {
			timer = nil
			if !a.heard && admit == nil && len(a.running) > 0 {
				a.reconcile(ctx)
			}
		}
	}
}

// drain applies every notice and release that has come.
func (a *admission) drain(ctx workflow.Context) {
	for {
		var n rollout.AdmissionNotice
		if !a.finishedCh.ReceiveAsync(&n) {
			break
		}
		a.heard = true
		a.finish(n.RolloutID, n.Attempt)
	}
	for {
		var r ReleaseRequest
		if !a.releaseCh.ReceiveAsync(&r) {
			break
		}
		if r.CheckpointID != "" && r.CheckpointID == a.in.Hold {
			a.logger.Info("admission released", "checkpoint", r.CheckpointID)
			a.in.Hold = ""
		}
	}
}

// finish counts rollout id (attempt) as no longer working, unless it runs a
// later attempt than the notice's (a run of a world a restore replaced).
func (a *admission) finish(id string, attempt int) {
	admitted, ok := a.running[id]
	switch {
	case ok && attempt >= admitted:
		delete(a.running, id)
		a.in.Counts.Finished++
	case !ok && a.admitting:
		a.early[id] = max(a.early[id], attempt)
	}
}

// runningCount counts the rollouts working: those known, and those an
// admit in flight is starting.
func (a *admission) runningCount() int { return len(a.running) + a.pending }

// plan picks the next rollouts to admit: whole units (a group's rollouts),
// in queue order, as many as fit under max_in_flight; one unit even if it
// does not fit when nothing runs. It marks them admitted in the queue.
func (a *admission) plan() ([]AdmitSlice, int) {
	free := a.in.MaxInFlight - a.runningCount()
	var out []AdmitSlice
	n := 0
	for i := range a.in.Queue {
		b := &a.in.Queue[i]
		units := min(b.Queued()/b.Unit, max(free, 0)/b.Unit, (maxAdmitPerActivity-n)/b.Unit)
		if units == 0 && a.runningCount()+n == 0 && b.Queued() > 0 {
			units = 1 // a group larger than max_in_flight runs alone
		}
		if units == 0 {
			break
		}
		take := units * b.Unit
		out = append(out, AdmitSlice{Ref: b.Ref, From: b.Admitted, Count: take})
		b.Admitted += take
		free -= take
		n += take
		if b.Queued() > 0 {
			break
		}
	}
	a.in.Queue = trimAdmitted(a.in.Queue)
	return out, n
}

// trimAdmitted drops the batches wholly admitted.
func trimAdmitted(q []QueuedBatch) []QueuedBatch {
	out := q[:0]
	for _, b := range q {
		if b.Queued() > 0 {
			out = append(out, b)
		}
	}
	return out
}

// admit schedules the start of n rollouts.
func (a *admission) admit(ctx workflow.Context, slices []AdmitSlice, n int) workflow.Future {
	a.admitting, a.pending = true, n
	a.in.Counts.Admitted += n
	opts := admitOptions
	opts.Summary = fmt.Sprintf("start %d rollouts", n)
	actx := workflow.WithActivityOptions(ctx, opts)
	return workflow.ExecuteActivity(actx, AdmitRolloutsName, AdmitInput{
		Set: a.in.Set, TaskQueue: a.in.TaskQueue, Stamp: a.in.Stamp, Slices: slices,
	})
}

// admitted takes in what an admit started: its rollouts run now, but those
// that already said they stopped (early notices) and those Temporal refused.
func (a *admission) admitted(ctx workflow.Context, f workflow.Future) {
	var res AdmitResult
	err := f.Get(ctx, &res)
	n := a.pending
	a.admitting, a.pending = false, 0
	if err != nil {
		// Only a bad input ends the activity: the batch is not in the
		// store. Its rollouts cannot start.
		a.logger.Error("rollouts could not be started", "rollouts", n, "error", err)
		a.in.Counts.NotStarted += n
		a.early = map[string]int{}
		return
	}
	for _, r := range res.Admitted {
		if at, ok := a.early[r.RolloutID]; ok && at >= r.Attempt {
			a.in.Counts.Finished++
			continue
		}
		a.running[r.RolloutID] = r.Attempt
	}
	for _, ns := range res.NotStarted {
		a.logger.Error("rollout could not be started", "rollout", ns.RolloutID, "reason", ns.Reason)
	}
	a.in.Counts.NotStarted += len(res.NotStarted)
	a.early = map[string]int{}
}

// reconcile asks Temporal which rollouts believed running stopped working
// without a notice.
func (a *admission) reconcile(ctx workflow.Context) {
	in := ReconcileInput{Set: a.in.Set, Running: a.runningList()}
	actx := workflow.WithActivityOptions(ctx, reconcileOptions)
	var res ReconcileResult
	if err := workflow.ExecuteActivity(actx, ReconcileAdmissionName, in).Get(ctx, &res); err != nil {
		a.logger.Warn("reconciliation failed; trying again later", "error", err)
		return
	}
	for _, r := range res.Finished {
		a.finish(r.RolloutID, r.Attempt)
	}
	if len(res.Finished) > 0 {
		a.logger.Warn("rollouts stopped without a notice", "rollouts", len(res.Finished))
	}
}

// done: every batch was received, admitted, and has stopped working.
func (a *admission) done() bool {
	return a.in.Received >= a.in.Batches && len(a.in.Queue) == 0 && len(a.running) == 0 &&
		a.in.Hold == "" && !a.storing && !a.admitting
}

// continueAsNew carries the state into a new run, once no handler runs and
// every signal that came is applied.
func (a *admission) continueAsNew(ctx workflow.Context) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	a.drain(ctx)
	a.logger.Info("continuing as new", "running", len(a.running), "queued", a.queued())
	return workflow.NewContinueAsNewError(ctx, AdmissionWorkflowName, a.state())
}

// state is the admission's whole state, as the input of its next run.
func (a *admission) state() AdmissionInput {
	next := a.in
	next.Running = a.runningList()
	next.Queue = append([]QueuedBatch(nil), a.in.Queue...)
	return next
}

// runningList is the running rollouts, sorted by id.
func (a *admission) runningList() []RunningRollout {
	out := make([]RunningRollout, 0, len(a.running))
	//workflowcheck:ignore the order is discarded by the sort below
	for id, at := range a.running {
		out = append(out, RunningRollout{RolloutID: id, Attempt: at})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RolloutID < out[j].RolloutID })
	return out
}

// queued counts the rollouts waiting.
func (a *admission) queued() int {
	n := 0
	for _, b := range a.in.Queue {
		n += b.Queued()
	}
	return n
}

func (a *admission) status() AdmissionStatus {
	st := AdmissionStatus{
		Set: a.in.Set, MaxInFlight: a.in.MaxInFlight, Running: a.runningCount(), Queued: a.queued(),
		QueuedByEnv: map[string]int{}, Total: a.in.Total, Enqueued: a.in.Enqueued, Batches: a.in.Batches,
		Received: a.in.Received, Hold: a.in.Hold, Counts: a.in.Counts,
	}
	for _, b := range a.in.Queue {
		for _, e := range b.EnvOf[b.Admitted:] {
			if int(e) < len(b.Envs) {
				st.QueuedByEnv[b.Envs[e]]++
			}
		}
	}
	return st
}

// describe shows where the admission stands in the Web UI (free: the
// details are read by query, not written to history).
func (a *admission) describe(ctx workflow.Context) {
	phase := "admitting"
	switch {
	case a.in.Hold != "":
		phase = "held for checkpoint " + a.in.Hold
	case a.in.Received < a.in.Batches:
		phase = "receiving"
	}
	d := fmt.Sprintf("**%s** — set %s: %d running of at most %d, %d queued; %d of %d batches received; %d admitted, %d finished, %d not started",
		phase, a.in.Set, a.runningCount(), a.in.MaxInFlight, a.queued(), a.in.Received, a.in.Batches,
		a.in.Counts.Admitted, a.in.Counts.Finished, a.in.Counts.NotStarted)
	if d != a.details {
		a.details = d
		workflow.SetCurrentDetails(ctx, d)
	}
}

// --- handlers ---

// validateEnqueue refuses, without writing history, a batch of another
// submission, one out of order, or a malformed one.
func (a *admission) validateEnqueue(req EnqueueRequest) error {
	switch {
	case req.Stamp != a.in.Stamp:
		return temporal.NewApplicationError(submissionConflict(a.in.Set, a.in.Stamp, req.Stamp), ErrSubmissionConflict)
	case req.Batches != a.in.Batches || req.Total != a.in.Total:
		return fmt.Errorf("batch of a submission of %d batches (%d rollouts); the set's has %d (%d rollouts)", req.Batches, req.Total, a.in.Batches, a.in.Total)
	case req.Batch < 0 || req.Batch >= req.Batches:
		return fmt.Errorf("batch %d: want 0..%d", req.Batch, req.Batches-1)
	case req.Batch < a.in.Received:
		return nil // already queued: accepted again, changes nothing
	case req.Batch > a.in.Received:
		return fmt.Errorf("batch %d before batch %d: send the batches in order", req.Batch, a.in.Received)
	case a.storing:
		return fmt.Errorf("batch %d is being queued; send it again when that answers", req.Batch)
	}
	if _, err := batchOf("", a.in.Set, req.Inputs); err != nil {
		return fmt.Errorf("batch %d: %w", req.Batch, err)
	}
	if a.in.Enqueued+len(req.Inputs) > a.in.Total || (req.Batch == req.Batches-1 && a.in.Enqueued+len(req.Inputs) != a.in.Total) {
		return fmt.Errorf("batch %d of %d rollouts: %d were queued before, the submission has %d", req.Batch, len(req.Inputs), a.in.Enqueued, a.in.Total)
	}
	return nil
}

// onEnqueue stores a batch's inputs and queues them.
func (a *admission) onEnqueue(ctx workflow.Context, req EnqueueRequest) (EnqueueResult, error) {
	if req.Batch < a.in.Received {
		return a.enqueued(), nil
	}
	a.storing = true
	defer func() { a.storing = false }()
	var st StoreBatchResult
	lctx := workflow.WithLocalActivityOptions(ctx, storeOptions)
	if err := workflow.ExecuteLocalActivity(lctx, StoreAdmissionBatchName, StoreBatchInput{Set: a.in.Set, Inputs: req.Inputs}).Get(ctx, &st); err != nil {
		return EnqueueResult{}, fmt.Errorf("queue batch %d of set %s: %w", req.Batch, a.in.Set, err)
	}
	b, err := batchOf(st.Ref, a.in.Set, req.Inputs)
	if err != nil {
		return EnqueueResult{}, err
	}
	b.First = a.in.Enqueued
	a.in.Queue = append(a.in.Queue, b)
	a.in.Received++
	a.in.Enqueued += b.Count
	a.dirty = true
	return a.enqueued(), nil
}

func (a *admission) enqueued() EnqueueResult {
	return EnqueueResult{Received: a.in.Received, Batches: a.in.Batches, Queued: a.queued()}
}

func (a *admission) onMaxInFlight(_ workflow.Context, req MaxInFlightRequest) (AdmissionStatus, error) {
	a.logger.Info("max_in_flight changed", "from", a.in.MaxInFlight, "to", req.MaxInFlight)
	a.in.MaxInFlight = req.MaxInFlight
	a.dirty = true
	return a.status(), nil
}

func (a *admission) validateHold(req HoldRequest) error {
	if err := rollout.ValidateName("checkpoint_id", req.CheckpointID, 128); err != nil {
		return err
	}
	if a.in.Hold != "" && a.in.Hold != req.CheckpointID {
		return fmt.Errorf("admission of set %s is held for checkpoint %q", a.in.Set, a.in.Hold)
	}
	return nil
}

// onHold stops admission once no start is in flight and answers what runs
// and what waits.
func (a *admission) onHold(ctx workflow.Context, req HoldRequest) (AdmissionSnapshot, error) {
	a.in.Hold = req.CheckpointID
	a.dirty = true
	if err := workflow.Await(ctx, func() bool { return !a.admitting }); err != nil {
		return AdmissionSnapshot{}, err
	}
	a.drain(ctx)
	return AdmissionSnapshot{
		Set: a.in.Set, CheckpointID: req.CheckpointID, Stamp: a.in.Stamp, MaxInFlight: a.in.MaxInFlight,
		Batches: a.in.Batches, Received: a.in.Received, Total: a.in.Total, Enqueued: a.in.Enqueued,
		Running: a.runningList(), Queue: append([]QueuedBatch{}, a.in.Queue...),
	}, nil
}

// submissionConflict says which request owns the set.
func submissionConflict(name string, have, got SubmitStamp) string {
	switch {
	case have.RequestID == "":
		return fmt.Sprintf("set %q already exists, submitted without a request id; submit under a new set name", name)
	case have.RequestID != got.RequestID:
		return fmt.Sprintf("set %q already exists, submitted by request %q; submit under a new set name", name, have.RequestID)
	}
	return fmt.Sprintf("request id %q was used for set %q with another body; use a new request id", got.RequestID, name)
}

// BatchOf describes a batch of inputs of set stored under ref, whose first
// rollout has submission index first: its unit (a group's size, every group
// whole and in repeat order; 1 outside datasets) and each rollout's
// environment. A restore queues a checkpoint's queued rollouts with it.
func BatchOf(ref string, first int, set string, inputs []rollout.Input) (QueuedBatch, error) {
	b, err := batchOf(ref, set, inputs)
	b.First = first
	return b, err
}

// batchOf is BatchOf without the submission index.
func batchOf(ref, set string, inputs []rollout.Input) (QueuedBatch, error) {
	if len(inputs) == 0 {
		return QueuedBatch{}, errors.New("no inputs")
	}
	unit := max(inputs[0].GroupSize, 1)
	if len(inputs)%unit != 0 {
		return QueuedBatch{}, fmt.Errorf("%d inputs do not make whole groups of %d", len(inputs), unit)
	}
	b := QueuedBatch{Ref: ref, Count: len(inputs), Unit: unit, EnvOf: make([]byte, len(inputs))}
	envIdx := map[string]int{}
	for i, in := range inputs {
		switch {
		case in.Set != set || in.RolloutID == "":
			return QueuedBatch{}, fmt.Errorf("input %d: rollout %q of set %q, not of set %q", i, in.RolloutID, in.Set, set)
		case max(in.GroupSize, 1) != unit:
			return QueuedBatch{}, fmt.Errorf("input %d: group size %d, the batch's is %d", i, in.GroupSize, unit)
		case unit > 1 && (in.Repeat != i%unit || in.Group != inputs[i-i%unit].Group):
			return QueuedBatch{}, fmt.Errorf("input %d: repeat %d of group %q breaks the batch's groups of %d", i, in.Repeat, in.Group, unit)
		}
		k, ok := envIdx[in.Env.Name]
		if !ok {
			k = len(b.Envs)
			if k >= MaxBatchEnvs {
				return QueuedBatch{}, fmt.Errorf("more than %d environments in one batch", MaxBatchEnvs)
			}
			envIdx[in.Env.Name] = k
			b.Envs = append(b.Envs, in.Env.Name)
		}
		b.EnvOf[i] = byte(k)
	}
	return b, nil
}
