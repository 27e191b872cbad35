package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/turnstile-rl/turnstile/rollout"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// runInfo is what the coordinator needs to know of a rollout's current run.
type runInfo struct {
	Exists     bool
	Running    bool
	RunID      string
	Attempt    int64
	HasAttempt bool
	Set        string
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
		Exists:  true,
		Running: info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		RunID:   info.GetExecution().GetRunId(),
	}
	ri.Attempt, ri.HasAttempt = saInt(info.GetSearchAttributes(), rollout.SARolloutAttempt)
	ri.Set, _ = saString(info.GetSearchAttributes(), rollout.SARolloutSet)
	return ri, nil
}

// saInt decodes an Int search attribute.
func saInt(sa *commonpb.SearchAttributes, name string) (int64, bool) {
	p, ok := sa.GetIndexedFields()[name]
	if !ok || p == nil {
		return 0, false
	}
	var v int64
	if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err != nil {
		return 0, false
	}
	return v, true
}

// saString decodes a Keyword search attribute.
func saString(sa *commonpb.SearchAttributes, name string) (string, bool) {
	p, ok := sa.GetIndexedFields()[name]
	if !ok || p == nil {
		return "", false
	}
	var v string
	if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err != nil {
		return "", false
	}
	return v, true
}

// visibleRun is one run of a rollout as visibility lists it.
type visibleRun struct {
	RolloutID  string
	Running    bool
	Attempt    int64
	HasAttempt bool
}

// listSet pages through every run of set's rollouts that query selects
// (extra is ANDed to the set filter), calling fn for each.
func listSet(ctx context.Context, c client.Client, set, extra string, fn func(visibleRun)) error {
	query := fmt.Sprintf("%s = %q", rollout.SARolloutSet, set)
	if extra != "" {
		query += " AND " + extra
	}
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return fmt.Errorf("list rollouts of set %s (%s): %w", set, query, err)
		}
		for _, e := range resp.GetExecutions() {
			id, ok := rollout.IDOf(e.GetExecution().GetWorkflowId())
			if !ok || id == "" {
				continue
			}
			r := visibleRun{RolloutID: id, Running: e.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}
			r.Attempt, r.HasAttempt = saInt(e.GetSearchAttributes(), rollout.SARolloutAttempt)
			fn(r)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}
