package coordinator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
	"github.com/turnstile-rl/turnstile/workflows/set"
)

// A restore forgets, in the set's ledger, the receipts of the rollouts it
// starts or fences recorded before its fence (the rolled-back world's),
// once; a scoped recovery forgets nothing.
func TestRestoreForgetsTheRolledBackAcknowledgements(t *testing.T) {
	fenced := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	fence := set.SetFence{Set: "s1", Windows: []rollout.FenceWindow{{RestoreID: "r1", CheckpointID: "ck1", From: fenced.Add(-time.Minute)}}}
	var forgot []set.ForgetAcks
	tc := &temporalfake.Client{
		Describe: func(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
			require.Equal(t, set.SetFenceWorkflowID("s1"), workflowID)
			return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
				StartTime: timestamppb.New(fenced),
				Memo:      &commonpb.Memo{Fields: map[string]*commonpb.Payload{set.MemoSetFence: temporalfake.Payload(fence)}},
			}}, nil
		},
		Update: func(o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
			require.Equal(t, set.AckLedgerWorkflowID("s1"), o.WorkflowID)
			require.Equal(t, set.UpdateForgetAcks, o.UpdateName)
			forgot = append(forgot, o.Args[0].(set.ForgetAcks))
			return temporalfake.UpdateHandle{Value: set.ForgetAcksResult{Forgotten: 1}}, nil
		},
	}
	c := &Coordinator{Client: tc}
	af := attemptsFile{Set: "s1", Start: []string{"s1-0000", "s1-0002"}, Fence: []string{"s1-0009"}}
	n, err := c.forgetRolledBack(t.Context(), tc, "r1", "ck1", af)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	require.Len(t, forgot, 1)
	assert.Equal(t, []string{"s1-0000", "s1-0002", "s1-0009"}, forgot[0].RolloutIDs)
	assert.True(t, forgot[0].RecordedBefore.Equal(fenced), "forgets what was recorded before the fence, %s", forgot[0].RecordedBefore)

	_, err = c.forgetRolledBack(t.Context(), tc, "other", "ck1", af)
	require.NoError(t, err)
	assert.Len(t, forgot, 1, "a restore whose fence the record does not hold forgets nothing")
	af.Recover = &recoverPlan{}
	_, err = c.forgetRolledBack(t.Context(), tc, "r1", "ck1", af)
	require.NoError(t, err)
	assert.Len(t, forgot, 1, "a scoped recovery forgets nothing")
}
