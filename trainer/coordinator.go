package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// This file starts Checkpoint and Restore runs under a request id, for a
// caller that may send the same request twice (the HTTP gateway): the run
// carries a stamp of the request in its memo, and a repeat finds the run
// the first request started instead of starting or failing a second one.

// MemoRequest is the memo field of a Checkpoint or Restore run started
// under a request id (a SubmitStamp of the request id and input digest).
const MemoRequest = "request"

// StartCheckpoint starts r's Checkpoint under requestID. When the
// checkpoint's run was started by the same request (same id and input), it
// returns that run with existing true; when by another, a ConflictError.
func (c *Client) StartCheckpoint(ctx context.Context, r CheckpointRequest, requestID string) (Started, bool, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return Started{}, false, fmt.Errorf("working directory: %w", err)
	}
	in, err := r.CheckpointInput(cwd)
	if err != nil {
		return Started{}, false, err
	}
	opts := CheckpointStartOptions(in.CheckpointID, c.taskQueue)
	return c.startStamped(ctx, stampedStart{opts: opts, name: checkpoint.CheckpointWorkflowName, in: in, requestID: requestID})
}

// StartRestore starts r's Restore under requestID, like StartCheckpoint. A
// restore id restored before by another request is restored again (a
// re-run finishes an interrupted restore and installs nothing twice),
// unless that run is still going.
func (c *Client) StartRestore(ctx context.Context, r RestoreRequest, requestID string) (Started, bool, error) {
	cwd, err := os.Getwd()
	if err != nil {
		return Started{}, false, fmt.Errorf("working directory: %w", err)
	}
	in, err := r.RestoreInput(cwd, c.taskQueue)
	if err != nil {
		return Started{}, false, err
	}
	opts := RestoreStartOptions(in, c.taskQueue)
	return c.startStamped(ctx, stampedStart{opts: opts, name: checkpoint.RestoreWorkflowName, in: in, requestID: requestID})
}

// stampedStart is one start of a coordinator run under a request id.
type stampedStart struct {
	opts      tclient.StartWorkflowOptions
	name      string
	in        any
	requestID string
}

// startStamped starts s unless its workflow's latest run carries the same
// stamp already.
func (c *Client) startStamped(ctx context.Context, s stampedStart) (Started, bool, error) {
	stamp, err := stampOf(s.requestID, s.in)
	if err != nil {
		return Started{}, false, err
	}
	started := Started{WorkflowID: s.opts.ID, TaskQueue: s.opts.TaskQueue}
	d, err := c.describe(ctx, s.opts.ID)
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		return started, false, fmt.Errorf("look up %s: %w", s.opts.ID, err)
	default:
		if got := memoStamp(d); got == stamp {
			started.RunID = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			return started, true, nil
		} else if got.RequestID == stamp.RequestID {
			return started, false, &ConflictError{Msg: fmt.Sprintf("request id %q started %s with another body; use a new request id", stamp.RequestID, s.opts.ID), Field: "request_id"}
		}
	}
	s.opts.Memo = map[string]any{MemoRequest: stamp}
	run, err := c.tc.ExecuteWorkflow(ctx, s.opts, s.name, s.in)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &already):
		return started, false, &ConflictError{Msg: fmt.Sprintf("%s is running or was completed by another request; choose another id", s.opts.ID)}
	case err != nil:
		return started, false, fmt.Errorf("start %s: %w", s.opts.ID, err)
	}
	started.RunID = run.GetRunID()
	return started, false, nil
}

// describe reads the latest run of workflowID.
func (c *Client) describe(ctx context.Context, workflowID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d, err := c.tc.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		return nil, err
	}
	return d.RawResponse, nil
}

// stampOf stamps a request id and the input it carries.
func stampOf(requestID string, in any) (SubmitStamp, error) {
	data, err := json.Marshal(in)
	if err != nil {
		return SubmitStamp{}, fmt.Errorf("digest of the input: %w", err)
	}
	sum := sha256.Sum256(data)
	return SubmitStamp{RequestID: requestID, Digest: hex.EncodeToString(sum[:])}, nil
}

// memoStamp reads a run's request stamp; zero when it has none.
func memoStamp(d *workflowservice.DescribeWorkflowExecutionResponse) SubmitStamp {
	var s SubmitStamp
	if p, ok := d.GetWorkflowExecutionInfo().GetMemo().GetFields()[MemoRequest]; ok {
		_ = converter.GetDefaultDataConverter().FromPayload(p, &s)
	}
	return s
}

// CoordinatorRun is the state of the latest run of a Checkpoint or Restore
// workflow.
type CoordinatorRun struct {
	WorkflowID, RunID string
	// Status is "running", "completed" or "failed" (any other close).
	Status string
	// Err is why a closed run did not complete.
	Err string
}

// NotFoundError names something Temporal does not hold.
type NotFoundError struct{ Msg string }

func (e *NotFoundError) Error() string { return e.Msg }

// CoordinatorStatus reads the latest run of workflowID and, when it
// completed, decodes its result into result.
func (c *Client) CoordinatorStatus(ctx context.Context, workflowID string, result any) (CoordinatorRun, error) {
	run := CoordinatorRun{WorkflowID: workflowID}
	d, err := c.describe(ctx, workflowID)
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return run, &NotFoundError{Msg: fmt.Sprintf("no workflow %s", workflowID)}
	}
	if err != nil {
		return run, fmt.Errorf("describe %s: %w", workflowID, err)
	}
	info := d.GetWorkflowExecutionInfo()
	run.RunID = info.GetExecution().GetRunId()
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		run.Status = "running"
		return run, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		run.Status = "completed"
	default:
		run.Status = "failed"
	}
	err = c.tc.GetWorkflow(ctx, workflowID, run.RunID).Get(ctx, result)
	var wee *temporal.WorkflowExecutionError
	switch {
	case err == nil:
	case errors.As(err, &wee):
		run.Err = causeFirst(err).Error()
	default:
		return run, fmt.Errorf("result of %s: %w", workflowID, err)
	}
	return run, nil
}
