package bookkeeping

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/fanout"
	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// DefaultStartConcurrency bounds the starts in flight of one batch that
// need not keep its order.
const DefaultStartConcurrency = 16

// EagerStarter starts rollouts from inside a worker process. Its client must
// be the one the process's workers were built with: a start on a task queue
// one of them polls then asks for eager execution, and the server hands the
// run's first workflow task back with the start, to run in this process at
// once (no first task waiting on the task queue behind the sticky backlog,
// docs/throughput-bound.md). The dev server needs
// system.enableEagerWorkflowStart (temporal-dev.yaml sets it); elsewhere, or
// with no free workflow-task slot, a start is an ordinary start.
type EagerStarter struct {
	Client client.Client
	// TaskQueue is where rollouts run when a batch names no queue.
	TaskQueue string
}

// BatchOptions are how StartBatch starts a batch.
type BatchOptions struct {
	// TaskQueue overrides EagerStarter.TaskQueue.
	TaskQueue string
	// Memo entries go into every rollout's memo.
	Memo map[string]any
	// Concurrency bounds the starts in flight (0: DefaultStartConcurrency;
	// 1: one at a time, in order).
	Concurrency int
	// Options, when set, adjusts each rollout's start options (a restore's
	// summary).
	Options func(rollout.Input, *client.StartWorkflowOptions)
	// Progress is called after each input (a heartbeat).
	Progress func()
}

// BatchOutcome is what became of one input.
type BatchOutcome int

// Outcomes of StartBatch.
const (
	// BatchStarted: this call started the run.
	BatchStarted BatchOutcome = iota + 1
	// BatchExisting: a run of the input's attempt exists (running or
	// closed); nothing was started.
	BatchExisting
	// BatchSuperseded: a run of a later attempt exists; nothing was
	// started.
	BatchSuperseded
)

// StartBatch starts every input, idempotent by workflow id and attempt: a
// retried batch finds what it started before as existing. Attempt 0 is
// started unless its workflow id was used before; a later attempt (a
// restore's) unless a run of it, or of a later attempt, exists. A run of an
// earlier attempt still running is an error (its restore ends it first):
// the batch is to be retried. Outcomes are in input order.
func (s *EagerStarter) StartBatch(ctx context.Context, inputs []rollout.Input, o BatchOptions) ([]BatchOutcome, error) {
	queue := o.TaskQueue
	if queue == "" {
		queue = s.TaskQueue
	}
	if queue == "" {
		return nil, rollout.BadInput("no task queue for the rollouts to start")
	}
	if s.Client == nil {
		return nil, temporal.NewNonRetryableApplicationError("starter: no Temporal client configured", rollout.ErrBadInput, nil)
	}
	limit := o.Concurrency
	if limit <= 0 {
		limit = DefaultStartConcurrency
	}
	out := make([]BatchOutcome, len(inputs))
	err := fanout.Each(ctx, len(inputs), limit, func(ctx context.Context, i int) error {
		var err error
		out[i], err = s.startOne(ctx, inputs[i], queue, o)
		if o.Progress != nil {
			o.Progress()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// startOne starts in unless a run of its attempt (or a later one) exists.
func (s *EagerStarter) startOne(ctx context.Context, in rollout.Input, queue string, o BatchOptions) (BatchOutcome, error) {
	if in.Attempt > 0 {
		outcome, err := s.existing(ctx, in)
		if outcome != 0 || err != nil {
			return outcome, err
		}
	}
	opts := rollout.StartOptions(in, queue)
	opts.EnableEagerStart = true
	for k, v := range o.Memo {
		opts.Memo[k] = v
	}
	if o.Options != nil {
		o.Options(in, &opts)
	}
	_, err := s.Client.ExecuteWorkflow(ctx, opts, rollout.WorkflowName, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return BatchStarted, nil
	case !errors.As(err, &already):
		return 0, fmt.Errorf("start %s attempt %d: %w", rollout.WorkflowID(in.RolloutID), in.Attempt, err)
	}
	// Started before (a retried batch, a second submission), or an
	// earlier attempt runs.
	outcome, xerr := s.existing(ctx, in)
	switch {
	case outcome != 0 || xerr != nil:
		return outcome, xerr
	case in.Attempt == 0:
		return BatchExisting, nil // its run carries no attempt: started elsewhere
	}
	return 0, fmt.Errorf("start %s attempt %d: a run of an earlier attempt is still running: %w", rollout.WorkflowID(in.RolloutID), in.Attempt, err)
}

// existing says whether the current run of in's rollout is of in's attempt
// (BatchExisting) or a later one (BatchSuperseded); 0 when neither.
func (s *EagerStarter) existing(ctx context.Context, in rollout.Input) (BatchOutcome, error) {
	desc, err := s.Client.DescribeWorkflow(ctx, rollout.WorkflowID(in.RolloutID), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("describe %s: %w", rollout.WorkflowID(in.RolloutID), err)
	}
	attempt, ok := visibility.SAInt(desc.RawResponse.GetWorkflowExecutionInfo().GetSearchAttributes(), rollout.SARolloutAttempt)
	switch {
	case !ok || int(attempt) < in.Attempt:
		return 0, nil
	case int(attempt) == in.Attempt:
		return BatchExisting, nil
	default:
		return BatchSuperseded, nil
	}
}

// StartActivities hold the activity that starts rollouts from inside the
// worker; register a pointer to it on the worker beside Activities.
type StartActivities struct {
	Starter *EagerStarter
}

// StartRollouts starts a batch of rollouts with eager workflow start (see
// EagerStarter), idempotent by workflow id and attempt, and says which it
// started, which existed and which a later attempt superseded. It
// heartbeats the number of inputs done.
func (a *StartActivities) StartRollouts(ctx context.Context, in rollout.StartRolloutsInput) (rollout.StartRolloutsResult, error) {
	if a.Starter == nil {
		return rollout.StartRolloutsResult{}, temporal.NewNonRetryableApplicationError("activities: no rollout starter configured", rollout.ErrBadInput, nil)
	}
	if len(in.Inputs) > rollout.MaxStartBatch {
		return rollout.StartRolloutsResult{}, rollout.BadInput("start rollouts: %d inputs, at most %d a batch", len(in.Inputs), rollout.MaxStartBatch)
	}
	if err := checkStartInputs(in.Inputs); err != nil {
		return rollout.StartRolloutsResult{}, err
	}
	var done atomic.Int64
	o := BatchOptions{TaskQueue: in.TaskQueue, Memo: in.Memo, Progress: func() {
		activity.RecordHeartbeat(ctx, done.Add(1))
	}}
	if in.InOrder {
		o.Concurrency = 1
	}
	outcomes, err := a.Starter.StartBatch(ctx, in.Inputs, o)
	if err != nil {
		return rollout.StartRolloutsResult{}, err
	}
	res := rollout.StartRolloutsResult{Started: []string{}, Existing: []string{}}
	for i, oc := range outcomes {
		id := in.Inputs[i].RolloutID
		switch oc {
		case BatchStarted:
			res.Started = append(res.Started, id)
		case BatchExisting:
			res.Existing = append(res.Existing, id)
		case BatchSuperseded:
			res.Superseded = append(res.Superseded, id)
		}
	}
	return res, nil
}

// checkStartInputs refuses a batch that names a rollout twice or holds an
// input no run could start with, before anything is started.
func checkStartInputs(inputs []rollout.Input) error {
	seen := map[string]bool{}
	for i, in := range inputs {
		if err := rollout.CheckIdentity(in.RolloutID, in.Attempt); err != nil {
			return rollout.BadInput("start rollouts: input %d: %v", i, err)
		}
		if seen[in.RolloutID] {
			return rollout.BadInput("start rollouts: rollout %s is in the batch twice", in.RolloutID)
		}
		seen[in.RolloutID] = true
		if in.Env.Name == "" || in.Policy.Model == "" {
			return rollout.BadInput("start rollouts: rollout %s names no environment or no policy model", in.RolloutID)
		}
	}
	return nil
}
