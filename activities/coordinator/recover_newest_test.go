package coordinator

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/stretchr/testify/require"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/checkpoint"
)

// TestNewestCheckpointScheduled: a recovery without a checkpoint id (the
// watchdog's) goes back to the set's newest completed checkpoint, and a
// scheduled fire counts: its input names no id, its workflow ID does.
func TestNewestCheckpointScheduled(t *testing.T) {
	base := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	runs := []struct {
		wid   string
		in    checkpoint.CheckpointInput
		close time.Time
	}{
		{"checkpoint/cp-manual", checkpoint.CheckpointInput{Set: "s1", CheckpointID: "cp-manual"}, base},
		{"checkpoint/every-s1-2026-12-02T02:48:00Z", checkpoint.CheckpointInput{Set: "s1", Scheduled: true}, base.Add(time.Minute)},
		{"checkpoint/every-s2-2026-12-02T02:50:00Z", checkpoint.CheckpointInput{Set: "s2", Scheduled: true}, base.Add(2 * time.Minute)},
	}
	inputs := map[string]checkpoint.CheckpointInput{}
	var infos []*workflowpb.WorkflowExecutionInfo
	for _, r := range runs {
		inputs[r.wid] = r.in
		infos = append(infos, &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: r.wid, RunId: "run-" + r.wid},
			Status:    enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(r.close),
		})
	}
	tc := &temporalfake.Client{
		List: func(string) ([]*workflowpb.WorkflowExecutionInfo, error) { return infos, nil },
		History: func(wid, _ string) client.HistoryEventIterator {
			return &temporalfake.History{Events: []*historypb.HistoryEvent{{
				EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
				Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
					Input: &commonpb.Payloads{Payloads: []*commonpb.Payload{temporalfake.Payload(inputs[wid])}},
				}},
			}}}
		},
	}
	c := &Coordinator{Client: tc}
	newest := func(set string) (string, error) {
		return c.recoveryCheckpoint(context.Background(), tc, checkpoint.PlanRecoveryInput{Set: set, Root: t.TempDir(), RestoreID: "r1"})
	}
	id, err := newest("s1")
	require.NoError(t, err)
	require.Equal(t, "every-s1-2026-12-02T024800Z", id, "the scheduled fire, newer than the manual checkpoint; s2's is another set's")

	infos = infos[:1]
	id, err = newest("s1")
	require.NoError(t, err)
	require.Equal(t, "cp-manual", id)

	_, err = newest("s3")
	require.ErrorContains(t, err, "set s3 has no completed checkpoint")
}

// TestRecoveryCheckpointKeepsItsPlan: a recovery run again (same restore
// id) goes back to the checkpoint its first run planned from, not to a
// newer one (which may have cut the replacement while it was still
// empty); without a plan anywhere it takes the newest.
func TestRecoveryCheckpointKeepsItsPlan(t *testing.T) {
	base := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	var infos []*workflowpb.WorkflowExecutionInfo
	for i, id := range []string{"cp-old", "cp-new"} {
		infos = append(infos, &workflowpb.WorkflowExecutionInfo{
			Execution: &commonpb.WorkflowExecution{WorkflowId: "checkpoint/" + id, RunId: "run-" + id},
			Status:    enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, CloseTime: timestamppb.New(base.Add(time.Duration(i) * time.Minute)),
		})
	}
	tc := &temporalfake.Client{
		List: func(string) ([]*workflowpb.WorkflowExecutionInfo, error) { return infos, nil },
		History: func(wid, _ string) client.HistoryEventIterator {
			in := checkpoint.CheckpointInput{Set: "s1", CheckpointID: strings.TrimPrefix(wid, "checkpoint/")}
			return &temporalfake.History{Events: []*historypb.HistoryEvent{{
				EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
				Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
					Input: &commonpb.Payloads{Payloads: []*commonpb.Payload{temporalfake.Payload(in)}},
				}},
			}}}
		},
	}
	root := t.TempDir()
	c := &Coordinator{Client: tc}
	in := checkpoint.PlanRecoveryInput{Set: "s1", Root: root, RestoreID: "auto-abc-0"}
	id, err := c.recoveryCheckpoint(context.Background(), tc, in)
	require.NoError(t, err)
	require.Equal(t, "cp-new", id, "no plan yet: the newest")

	dir := filepath.Join(root, "cp-old", checkpoint.RestoreDir, "auto-abc-0")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	plan := `{"checkpoint_id":"cp-old","restore_id":"auto-abc-0","set":"s1","manifest_digest":"d","attempts":{"s1-0001":1},"start":["s1-0001"]}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "attempts.json"), []byte(plan), 0o600))
	id, err = c.recoveryCheckpoint(context.Background(), tc, in)
	require.NoError(t, err)
	require.Equal(t, "cp-old", id, "the checkpoint the first run planned from")

	in.RestoreID = "auto-abc-1"
	id, err = c.recoveryCheckpoint(context.Background(), tc, in)
	require.NoError(t, err)
	require.Equal(t, "cp-new", id, "another recovery's plan is not this one's")
}
