package trainer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/internal/location"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// Checkpoint starts the Checkpoint workflow of r and, when wait, waits for
// its result (nil without wait). A failed workflow is an error carrying the
// workflow's own message.
func (c *Client) Checkpoint(ctx context.Context, r CheckpointRequest, wait bool) (*checkpoint.CheckpointResult, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	in, err := r.CheckpointInput(cwd)
	if err != nil {
		return nil, err
	}
	opts := CheckpointStartOptions(in.CheckpointID, c.taskQueue)
	return runCoordinator[checkpoint.CheckpointResult](ctx, c, coordinatorStart{opts: opts, name: checkpoint.CheckpointWorkflowName, in: in}, wait)
}

// CheckpointInput turns r into the workflow's input: the root made absolute
// against cwd, the participants checked. Bad input is an error naming the
// starter's flag; nothing is started.
func (r CheckpointRequest) CheckpointInput(cwd string) (checkpoint.CheckpointInput, error) {
	if err := rollout.ValidateSet(r.Set); err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	if err := checkpoint.ValidateName("--id", r.CheckpointID); err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	root, err := absRoot(r.Root, cwd)
	if err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	parts, err := participants(r.Participants)
	if err != nil {
		return checkpoint.CheckpointInput{}, err
	}
	if r.Tag != "" {
		if err := checkpoint.ValidateName("--tag", r.Tag); err != nil {
			return checkpoint.CheckpointInput{}, err
		}
	}
	if r.Keep < 0 {
		return checkpoint.CheckpointInput{}, fmt.Errorf("--keep %d: want 0 (no retention) or more", r.Keep)
	}
	in := checkpoint.CheckpointInput{
		CheckpointID: r.CheckpointID, Set: r.Set, Root: root, Participants: parts, StayPaused: r.StayPaused,
		Tag: r.Tag, Keep: r.Keep,
	}
	switch {
	case !r.Deadline.IsZero() && r.Timeout != 0:
		return checkpoint.CheckpointInput{}, errors.New("give --timeout or --deadline, not both")
	case !r.Deadline.IsZero():
		in.Deadline = r.Deadline.UTC()
	case r.Timeout > 0:
		in.Timeout = r.Timeout.String()
	default:
		return checkpoint.CheckpointInput{}, fmt.Errorf("--timeout %s: want a positive duration such as 60s", r.Timeout)
	}
	return in, nil
}

// absRoot makes a checkpoint root absolute against cwd (the worker may run
// in another directory, so a relative path would mean something else there).
// A storage URL (file:///…, s3://bucket/prefix?…) is checked and kept.
func absRoot(root, cwd string) (string, error) {
	if strings.TrimSpace(root) == "" {
		return "", errors.New("--root: a directory or storage URL is required")
	}
	if location.IsURL(root) {
		if _, err := location.Parse(root); err != nil {
			return "", fmt.Errorf("--root: %w", err)
		}
		return root, nil
	}
	if !filepath.IsAbs(root) {
		if !filepath.IsAbs(cwd) {
			return "", fmt.Errorf("--root %q is relative and the working directory %q is not absolute", root, cwd)
		}
		root = filepath.Join(cwd, root)
	}
	return filepath.Clean(root), nil
}

// CheckpointStartOptions start checkpoint id at most once: a running one
// is not started twice, and one that committed is not run again; an
// aborted one may be retried under the same id. rolloutQueue is the
// rollouts' task queue; the checkpoint runs on its control plane's
// (checkpoint.ControlTaskQueue of it), whichever door starts it.
func CheckpointStartOptions(checkpointID, rolloutQueue string) tclient.StartWorkflowOptions {
	return tclient.StartWorkflowOptions{
		ID:                                       checkpoint.CheckpointWorkflowID(checkpointID),
		TaskQueue:                                checkpoint.ControlTaskQueue(rolloutQueue),
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		StaticSummary:                            "checkpoint " + checkpointID,
		TypedSearchAttributes:                    checkpointAttributes(checkpointID),
	}
}

// checkpointAttributes make a Checkpoint or Restore run searchable by its
// checkpoint, beside the rollouts held for it.
func checkpointAttributes(checkpointID string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(rollout.SACheckpointID).ValueSet(checkpointID))
}

// coordinatorStart is one start of a Checkpoint or Restore workflow.
type coordinatorStart struct {
	opts tclient.StartWorkflowOptions
	name string
	in   any
	// wait for the result; onStart, when set, hears of the start first.
	wait    bool
	onStart func(Started)
}

// runCoordinator starts s, tells c.OnStart, and, when wait, returns the
// workflow's result of type R.
func runCoordinator[R any](ctx context.Context, c *Client, s coordinatorStart, wait bool) (*R, error) {
	var res R
	s.wait, s.onStart = wait, c.OnStart
	if err := startCoordinator(ctx, c.tc, s, &res); err != nil || !wait {
		return nil, err
	}
	return &res, nil
}

// startCoordinator starts a Checkpoint or Restore workflow, calls onStart
// (when set) and, when wait, waits for its result into out. A failed
// workflow is an error carrying the workflow's own message.
func startCoordinator(ctx context.Context, c workflowStarter, s coordinatorStart, out any) error {
	run, err := c.ExecuteWorkflow(ctx, s.opts, s.name, s.in)
	if err != nil {
		var already *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &already) {
			return fmt.Errorf("%s is already running or was already completed: %w", s.opts.ID, err)
		}
		return fmt.Errorf("start %s: %w", s.opts.ID, err)
	}
	if s.onStart != nil {
		s.onStart(Started{WorkflowID: s.opts.ID, RunID: run.GetRunID(), TaskQueue: s.opts.TaskQueue})
	}
	if !s.wait {
		return nil
	}
	if err := run.Get(ctx, out); err != nil {
		var wee *temporal.WorkflowExecutionError
		if errors.As(err, &wee) {
			return causeFirst(err)
		}
		return fmt.Errorf("wait for %s: %w", s.opts.ID, err)
	}
	return nil
}
