package trainer

import (
	"context"
	"fmt"
	"os"

	enumspb "go.temporal.io/api/enums/v1"
	tclient "go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// Restore starts the Restore workflow of r on the control plane's task
// queue (its rollouts go to the client's task queue) and, when wait, waits for its result (nil without
// wait).
func (c *Client) Restore(ctx context.Context, r RestoreRequest, wait bool) (*checkpoint.RestoreResult, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	in, err := r.RestoreInput(cwd, c.taskQueue)
	if err != nil {
		return nil, err
	}
	opts := RestoreStartOptions(in, c.taskQueue)
	return runCoordinator[checkpoint.RestoreResult](ctx, c, coordinatorStart{opts: opts, name: checkpoint.RestoreWorkflowName, in: in}, wait)
}

// RestoreInput turns r into the workflow's input (root made absolute
// against cwd); the rollouts go to taskQueue.
func (r RestoreRequest) RestoreInput(cwd, taskQueue string) (checkpoint.RestoreInput, error) {
	if err := checkpoint.ValidateName("--id", r.CheckpointID); err != nil {
		return checkpoint.RestoreInput{}, err
	}
	if r.RestoreID != "" {
		if err := checkpoint.ValidateName("--restore-id", r.RestoreID); err != nil {
			return checkpoint.RestoreInput{}, err
		}
	}
	root, err := absRoot(r.Root, cwd)
	if err != nil {
		return checkpoint.RestoreInput{}, err
	}
	parts, err := participants(r.Participants)
	if err != nil {
		return checkpoint.RestoreInput{}, err
	}
	return checkpoint.RestoreInput{CheckpointID: r.CheckpointID, RestoreID: r.RestoreID, Root: root, Participants: parts, TaskQueue: taskQueue}, nil
}

// RestoreStartOptions start the restore of in (workflow ID
// restore/<restore_id>, the restore id defaulting to the checkpoint id). A
// restore may be run again once it has closed (a re-run finishes an
// interrupted one and never starts an attempt twice), but not while one is
// running. rolloutQueue is the rollouts' task queue; the restore runs on
// its control plane's (checkpoint.ControlTaskQueue of it), whichever door
// starts it.
func RestoreStartOptions(in checkpoint.RestoreInput, rolloutQueue string) tclient.StartWorkflowOptions {
	restoreID := in.RestoreID
	if restoreID == "" {
		restoreID = in.CheckpointID
	}
	return tclient.StartWorkflowOptions{
		ID:                                       checkpoint.RestoreWorkflowID(restoreID),
		TaskQueue:                                checkpoint.ControlTaskQueue(rolloutQueue),
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            "restore " + restoreID + " of checkpoint " + in.CheckpointID,
		TypedSearchAttributes:                    checkpointAttributes(in.CheckpointID),
	}
}
