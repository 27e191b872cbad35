package trainer

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A run listed as held whose status query goes unanswered (the set's
// ledger released it after the listing, and it closed while queried) is
// read as the closed run it became; one still held keeps the query's error;
// one released but not yet closed holds no result any more.
func TestFetchFinishedReleasedWhileQueried(t *testing.T) {
	queryErr := context.DeadlineExceeded
	res := &rollout.Result{RolloutID: "a1-0007", Set: "a1", Env: "counter", Reward: 1}
	describeAs := func(status enumspb.WorkflowExecutionStatus, phase rollout.Phase) *temporalfake.Client {
		return &temporalfake.Client{
			Query: func(string, string, string, ...any) (converter.EncodedValue, error) { return nil, queryErr },
			Describe: func(workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
				assert.Equal(t, "r1", runID, "the listed run is described")
				return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
					Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: runID},
					Status:    status,
					SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
						rollout.SARolloutPhase: temporalfake.Payload(string(phase)),
					}},
				}}, nil
			},
			GetRun: func(string, string) tclient.WorkflowRun { return temporalfake.Run{Value: res} },
		}
	}
	held := func() RolloutRecord {
		return RolloutRecord{WorkflowID: rollout.WorkflowID("a1-0007"), RunID: "r1", RolloutID: "a1-0007",
			Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, Phase: string(rollout.PhaseAwaitingAck)}
	}

	rec := held()
	ok, err := fetchFinished(t.Context(), describeAs(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, rollout.PhaseCompleted), &rec)
	require.NoError(t, err)
	require.True(t, ok, "a run closed meanwhile is exported")
	require.NotNil(t, rec.Result)
	assert.Equal(t, 1.0, rec.Result.Reward)
	assert.True(t, rec.Closed())

	rec = held()
	ok, err = fetchFinished(t.Context(), describeAs(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, rollout.PhaseCompleted), &rec)
	require.NoError(t, err)
	assert.False(t, ok, "a released run not closed yet holds no result")

	rec = held()
	_, err = fetchFinished(t.Context(), describeAs(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, rollout.PhaseAwaitingAck), &rec)
	assert.True(t, errors.Is(err, queryErr), "a run still held keeps the query's error: %v", err)
}
