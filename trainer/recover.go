package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// RecoverServerRequest asks for the scoped recovery of a set after one of
// its environment servers died: the rollouts whose sessions lived on Server
// go back to their boundary in a checkpoint (or start over from their seed)
// as a new attempt on Replacement; every other rollout runs on untouched.
type RecoverServerRequest struct {
	Set string
	// Server is the dead server's base URL; Replacement a fresh server
	// started with the dead one's name.
	Server, Replacement string
	// Checkpoint is the checkpoint id to go back to; empty: the newest
	// committed checkpoint of the set.
	Checkpoint string
	// Root is the checkpoint root (made absolute against the working
	// directory), or a storage URL.
	Root string
	// RequestID names the recovery (empty: derived from Server).
	RequestID string
}

// RecoverServer starts the RecoverServer workflow of r on the control
// plane's task queue (ID recover/<set>/<digest of Server>) and returns at
// once; WaitRecoverServer waits for it. A repeat of a recovery that is
// running or has completed starts nothing and names the existing run.
func (c *Client) RecoverServer(ctx context.Context, r RecoverServerRequest) (Started, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return Started{}, fmt.Errorf("working directory: %w", err)
	}
	in, err := r.RecoverServerInput(cwd, c.taskQueue)
	if err != nil {
		return Started{}, err
	}
	opts := RecoverServerStartOptions(in, c.taskQueue)
	started := Started{WorkflowID: opts.ID, TaskQueue: opts.TaskQueue}
	run, err := c.tc.ExecuteWorkflow(ctx, opts, checkpoint.RecoverServerWorkflowName, in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		// Completed before: the recovery is done; name its run.
		d, derr := c.describe(ctx, opts.ID)
		if derr != nil {
			return started, fmt.Errorf("look up %s: %w", opts.ID, derr)
		}
		started.RunID = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		return started, nil
	}
	if err != nil {
		return started, fmt.Errorf("start %s: %w", opts.ID, err)
	}
	started.RunID = run.GetRunID()
	if c.OnStart != nil {
		c.OnStart(started)
	}
	return started, nil
}

// WaitRecoverServer waits for the recovery s and returns its result; a
// failed recovery is an error carrying the workflow's own message.
func (c *Client) WaitRecoverServer(ctx context.Context, s Started) (checkpoint.RecoverServerResult, error) {
	var res checkpoint.RecoverServerResult
	if err := c.tc.GetWorkflow(ctx, s.WorkflowID, s.RunID).Get(ctx, &res); err != nil {
		var wee *temporal.WorkflowExecutionError
		if errors.As(err, &wee) {
			return res, causeFirst(err)
		}
		return res, fmt.Errorf("wait for %s: %w", s.WorkflowID, err)
	}
	return res, nil
}

// RecoverServerInput turns r into the workflow's input (root made absolute
// against cwd, URLs cleaned); the moved rollouts go to taskQueue.
func (r RecoverServerRequest) RecoverServerInput(cwd, taskQueue string) (checkpoint.RecoverServerInput, error) {
	root, err := absRoot(r.Root, cwd)
	if err != nil {
		return checkpoint.RecoverServerInput{}, err
	}
	server, err := participants([]string{r.Server})
	if err != nil {
		return checkpoint.RecoverServerInput{}, fmt.Errorf("--server: %w", err)
	}
	replacement, err := participants([]string{r.Replacement})
	if err != nil {
		return checkpoint.RecoverServerInput{}, fmt.Errorf("--replacement: %w", err)
	}
	in := checkpoint.RecoverServerInput{Set: r.Set, Server: server[0], Replacement: replacement[0], CheckpointID: r.Checkpoint,
		Root: root, RequestID: r.RequestID, TaskQueue: taskQueue}
	if err := in.Validate(); err != nil {
		return checkpoint.RecoverServerInput{}, err
	}
	return in, nil
}

// RecoverServerStartOptions start the recovery of in: one workflow per
// (set, dead server). A repeat while it runs joins it; after it completed,
// it is not run again; after it failed, it may be (every step is
// idempotent). rolloutQueue is the rollouts' task queue; the recovery runs
// on its control plane's (checkpoint.ControlTaskQueue of it).
func RecoverServerStartOptions(in checkpoint.RecoverServerInput, rolloutQueue string) tclient.StartWorkflowOptions {
	return tclient.StartWorkflowOptions{
		ID:                       checkpoint.RecoverServerWorkflowID(in.Set, in.Server),
		TaskQueue:                checkpoint.ControlTaskQueue(rolloutQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		StaticSummary:            fmt.Sprintf("recover set %s from the death of %s onto %s", in.Set, in.Server, in.Replacement),
	}
}
