package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile-rl/turnstile/internal/visibility"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
)

// runInfo is what the coordinator needs to know of a rollout's current run.
type runInfo struct {
	Exists  bool
	Running bool
	// Completed: the current run closed Completed (it has its result).
	Completed  bool
	RunID      string
	Attempt    int64
	HasAttempt bool
	Set        string
	Phase      string
	// CheckpointID is the checkpoint a parked run is held for.
	CheckpointID string
	// StartTime is when the current run started.
	StartTime time.Time
}

// describeRollout describes the current run of rollout id. A workflow that
// does not exist is not an error: Exists is false.
func describeRollout(ctx context.Context, c client.Client, id string) (runInfo, error) {
	desc, err := c.DescribeWorkflow(ctx, rollout.WorkflowID(id), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return runInfo{}, nil
	}
	if err != nil {
		return runInfo{}, fmt.Errorf("describe %s: %w", rollout.WorkflowID(id), err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	ri := runInfo{
		Exists:    true,
		Running:   info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		Completed: info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED,
		RunID:     info.GetExecution().GetRunId(),
	}
	ri.Attempt, ri.HasAttempt = visibility.SAInt(info.GetSearchAttributes(), rollout.SARolloutAttempt)
	ri.Set, _ = visibility.SAKeyword(info.GetSearchAttributes(), rollout.SARolloutSet)
	ri.Phase, _ = visibility.SAKeyword(info.GetSearchAttributes(), rollout.SARolloutPhase)
	ri.CheckpointID, _ = visibility.SAKeyword(info.GetSearchAttributes(), rollout.SACheckpointID)
	if st := info.GetStartTime(); st != nil {
		ri.StartTime = st.AsTime()
	}
	return ri, nil
}

// checkpointStart is when the Checkpoint workflow of checkpointID started:
// the earliest a run started after its cut can have started. Zero when
// this Temporal holds no such workflow (a restore after everything was
// lost: every run it holds started after the cut).
func checkpointStart(ctx context.Context, c client.Client, checkpointID string) (time.Time, error) {
	desc, err := c.DescribeWorkflow(ctx, checkpoint.CheckpointWorkflowID(checkpointID), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("describe %s: %w", checkpoint.CheckpointWorkflowID(checkpointID), err)
	}
	st := desc.RawResponse.GetWorkflowExecutionInfo().GetStartTime()
	if st == nil {
		return time.Time{}, nil
	}
	return st.AsTime(), nil
}

// visibleRun is one run of a rollout as visibility lists it.
type visibleRun struct {
	RolloutID  string
	Running    bool
	Attempt    int64
	HasAttempt bool
}

// listSet calls fn for every run of set's rollouts that visibility lists
// (extra is ANDed to the set filter), skipping workflows that are not
// rollouts.
func listSet(ctx context.Context, c client.Client, set, extra string, fn func(visibleRun)) error {
	return visibility.ListSet(ctx, c, set, extra, func(e *workflowpb.WorkflowExecutionInfo) error {
		id, ok := rollout.IDOf(e.GetExecution().GetWorkflowId())
		if !ok || id == "" {
			return nil
		}
		r := visibleRun{RolloutID: id, Running: e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
		r.Attempt, r.HasAttempt = visibility.SAInt(e.GetSearchAttributes(), rollout.SARolloutAttempt)
		fn(r)
		return nil
	})
}
