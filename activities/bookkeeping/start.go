package bookkeeping

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// RolloutStarter starts rollout runs for a set's admission. It is the seam
// where a batched starter (one that starts many runs per call) replaces the
// one-at-a-time starter below: AdmitRollouts needs only this.
type RolloutStarter interface {
	// Start starts every input in order, each idempotent by its workflow
	// id, and says for each what happened. An error is transient: the
	// whole call is tried again, and what it started counts as existing.
	Start(ctx context.Context, inputs []rollout.Input, spec StartSpec) ([]StartOutcome, error)
}

// StartSpec is how a batch of rollouts is started.
type StartSpec struct {
	TaskQueue string
	// Stamp goes into every rollout's memo (set.MemoSubmit).
	Stamp set.SubmitStamp
}

// StartOutcome is what became of one input: started (or found started
// before, Existing) as Attempt, or Refused for good.
type StartOutcome struct {
	Attempt  int
	Existing bool
	Refused  error
}

// startClient is the part of client.Client a starter needs.
type startClient interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	TerminateWorkflow(ctx context.Context, workflowID, runID, reason string, details ...any) error
	visibility.HistoryReader
}

// NewStarter starts rollouts one at a time, in order (so their start times
// are their submission order), with eager workflow start: when the worker
// running the admission polls the rollouts' task queue too, the first
// workflow task comes back with the start instead of waiting behind the
// queue's backlog.
func NewStarter(c startClient) RolloutStarter { return &seqStarter{c: c} }

type seqStarter struct{ c startClient }

func (s *seqStarter) Start(ctx context.Context, inputs []rollout.Input, spec StartSpec) ([]StartOutcome, error) {
	out := make([]StartOutcome, len(inputs))
	fence := &fenceCache{d: s.c}
	for i, in := range inputs {
		if activity.IsActivity(ctx) {
			activity.RecordHeartbeat(ctx, i)
		}
		o, err := s.startOne(ctx, in, spec, fence)
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}

// startOne starts in. An attempt above 0 (a restore's) is started only if
// no run of it (or of a later attempt) exists, so a retried call never runs
// one attempt twice. A run that exists already is this rollout's, unless a
// restore of the set fenced it: then the rollout starts again as the next
// attempt (the old run, if it still runs, is ended).
func (s *seqStarter) startOne(ctx context.Context, in rollout.Input, spec StartSpec, fence *fenceCache) (StartOutcome, error) {
	if in.Attempt > 0 {
		cur, err := describeRun(ctx, s.c, in.RolloutID)
		if err != nil {
			return StartOutcome{}, err
		}
		if cur.exists && cur.attempt >= in.Attempt {
			return StartOutcome{Attempt: cur.attempt, Existing: true}, nil
		}
		if cur.exists && cur.running {
			return s.replace(ctx, in, spec, cur, "a restore of the set queued this rollout again")
		}
	}
	err := s.start(ctx, in, spec)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if !errors.As(err, &already) {
		return s.outcome(in, err)
	}
	cur, err := describeRun(ctx, s.c, in.RolloutID)
	if err != nil {
		return StartOutcome{}, err
	}
	fenced, err := fence.fences(ctx, in.Set, cur, s.c)
	if err != nil || !fenced {
		return StartOutcome{Attempt: max(cur.attempt, in.Attempt), Existing: true}, err
	}
	return s.replace(ctx, in, spec, cur, "a restore of the set fenced this run; the rollout was queued again")
}

// replace ends cur (when it runs) and starts in as the attempt after it.
func (s *seqStarter) replace(ctx context.Context, in rollout.Input, spec StartSpec, cur runState, why string) (StartOutcome, error) {
	if cur.running {
		err := s.c.TerminateWorkflow(ctx, rollout.WorkflowID(in.RolloutID), cur.runID, why)
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			return StartOutcome{}, fmt.Errorf("end the replaced run of %s: %w", in.RolloutID, err)
		}
	}
	in.Attempt = max(in.Attempt, cur.attempt+1)
	in.StartedAt = nil
	return s.outcome(in, s.start(ctx, in, spec))
}

func (s *seqStarter) start(ctx context.Context, in rollout.Input, spec StartSpec) error {
	opts := rollout.StartOptions(in, spec.TaskQueue)
	opts.EnableEagerStart = true
	opts.Memo[set.MemoSubmit] = spec.Stamp
	_, err := s.c.ExecuteWorkflow(ctx, opts, rollout.WorkflowName, in)
	return err
}

// outcome classifies a start's error: none is a start; an argument Temporal
// refuses (an unregistered search attribute, a malformed input) is refused
// for good; anything else is retried.
func (s *seqStarter) outcome(in rollout.Input, err error) (StartOutcome, error) {
	var invalid *serviceerror.InvalidArgument
	switch {
	case err == nil:
		return StartOutcome{Attempt: in.Attempt}, nil
	case errors.As(err, &invalid):
		return StartOutcome{Refused: fmt.Errorf("start %s: %w", rollout.WorkflowID(in.RolloutID), err)}, nil
	default:
		return StartOutcome{}, fmt.Errorf("start %s: %w", rollout.WorkflowID(in.RolloutID), err)
	}
}

// runState is what a starter knows of a rollout's current run.
type runState struct {
	exists, running   bool
	workflowID, runID string
	attempt           int
	started           time.Time
}

func describeRun(ctx context.Context, c startClient, id string) (runState, error) {
	desc, err := c.DescribeWorkflowExecution(ctx, rollout.WorkflowID(id), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return runState{}, nil
	}
	if err != nil {
		return runState{}, fmt.Errorf("describe %s: %w", rollout.WorkflowID(id), err)
	}
	info := desc.GetWorkflowExecutionInfo()
	st := runState{exists: true, running: info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		workflowID: rollout.WorkflowID(id), runID: info.GetExecution().GetRunId()}
	a, _ := visibility.SAInt(info.GetSearchAttributes(), rollout.SARolloutAttempt)
	st.attempt = int(a)
	if t := info.GetStartTime(); t != nil {
		st.started = t.AsTime()
	}
	return st, nil
}

// fenceCache reads a set's fence record once per call.
type fenceCache struct {
	d    visibility.Describer
	read bool
	f    set.SetFence
}

// fences says whether a restore of set fenced the run cur: its chain (the
// first run of its attempt, continued as new or not) started no later than
// the newest fence.
func (fc *fenceCache) fences(ctx context.Context, name string, cur runState, h visibility.HistoryReader) (bool, error) {
	if !fc.read {
		f, err := visibility.ReadSetFence(ctx, fc.d, name)
		if err != nil {
			return false, err
		}
		fc.f, fc.read = f, true
	}
	if len(fc.f.Windows) == 0 {
		return false, nil
	}
	chain := cur.started
	var first rollout.Input
	if err := visibility.DecodeStartInput(ctx, h, cur.workflowID, cur.runID, &first); err == nil && first.StartedAt != nil {
		chain = *first.StartedAt
	}
	_, fenced := fc.f.FencesRun(chain)
	return fenced, nil
}
