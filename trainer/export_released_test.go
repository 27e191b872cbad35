package trainer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	tclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/internal/transcriptstore"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// A run listed as held whose status query goes unanswered (the set's
// ledger released it after the listing, and it closed while queried) is
// read as the closed run it became; one still held keeps the query's error;
// one released that does not close is an error to an export (waited for
// up to releasedCloseTimeout; the fake's run "closes" at once without
// changing its description), and left out by the feed.
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
	ok, err := fetchFinished(t.Context(), describeAs(enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, rollout.PhaseCompleted), nil, &rec, awaitClose)
	require.NoError(t, err)
	require.True(t, ok, "a run closed meanwhile is exported")
	require.NotNil(t, rec.Result)
	assert.Equal(t, 1.0, rec.Result.Reward)
	assert.True(t, rec.Closed())

	rec = held()
	_, err = fetchFinished(t.Context(), describeAs(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, rollout.PhaseCompleted), nil, &rec, awaitClose)
	require.Error(t, err, "a released run that never closes is an error to an export, not a silent skip")
	assert.Contains(t, err.Error(), "released but has not closed")

	rec = held()
	ok, err = fetchFinished(t.Context(), describeAs(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, rollout.PhaseCompleted), nil, &rec, leaveOut)
	require.NoError(t, err)
	assert.False(t, ok, "to the feed, a released run not closed yet holds no result to deliver")

	rec = held()
	_, err = fetchFinished(t.Context(), describeAs(enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, rollout.PhaseAwaitingAck), nil, &rec, awaitClose)
	assert.True(t, errors.Is(err, queryErr), "a run still held keeps the query's error: %v", err)
}

// releasedRun is one rollout whose acknowledged result the set's ledger
// has released: it runs, in phase completed, until its close is awaited,
// and is then closed (completed).
type releasedRun struct {
	t      *testing.T
	res    *rollout.Result
	listed rollout.Phase // the phase visibility lists it in
	closed atomic.Bool
}

func (r *releasedRun) info() *workflowpb.WorkflowExecutionInfo {
	return &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: rollout.WorkflowID(r.res.RolloutID), RunId: "r1"},
		Status:    enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
		StartTime: timestamppb.New(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)),
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			rollout.SARolloutID: temporalfake.Payload(r.res.RolloutID), rollout.SARolloutSet: temporalfake.Payload("a1"),
			rollout.SARolloutAttempt: temporalfake.Payload(0), rollout.SARolloutPhase: temporalfake.Payload(string(r.listed)),
		}},
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{rollout.MemoEnv: temporalfake.Payload("counter")}},
	}
}

// list is visibility: the run by id, and in a set query when the query
// selects running runs of the phase it is listed in.
func (r *releasedRun) list(query string) ([]*workflowpb.WorkflowExecutionInfo, error) {
	byID := strings.HasPrefix(query, "WorkflowId IN (")
	if byID || strings.Contains(query, fmt.Sprintf("%q", string(r.listed))) {
		return []*workflowpb.WorkflowExecutionInfo{r.info()}, nil
	}
	return nil, nil
}

func (r *releasedRun) describe(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if workflowID != rollout.WorkflowID(r.res.RolloutID) {
		return nil, serviceerror.NewNotFound("no workflow " + workflowID) // the set's fence record, a group ledger
	}
	info := r.info()
	if r.closed.Load() {
		info.Status, info.CloseTime = enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, timestamppb.New(info.StartTime.AsTime().Add(time.Second))
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: info}, nil
}

// awaitedRun closes the released run when its result is awaited.
type awaitedRun struct {
	temporalfake.Run
	closed *atomic.Bool
}

func (a awaitedRun) Get(ctx context.Context, valuePtr any) error {
	a.closed.Store(true)
	return a.Run.Get(ctx, valuePtr)
}

func (r *releasedRun) client() *temporalfake.Client {
	return &temporalfake.Client{
		List: r.list, Describe: r.describe,
		GetRun: func(string, string) tclient.WorkflowRun {
			return awaitedRun{Run: temporalfake.Run{Value: r.res}, closed: &r.closed}
		},
		Query: func(string, string, string, ...any) (converter.EncodedValue, error) {
			if r.closed.Load() {
				return nil, serviceerror.NewNotFound("closed")
			}
			return temporalfake.Value{V: rollout.Status{Phase: rollout.PhaseCompleted, Result: r.res}}, nil
		},
	}
}

// An export right after an acknowledgement: the ledger released the
// result, the run is closing. Whether visibility still lists it as held or
// already in phase completed, the export waits for it to close and writes
// its line (the old export skipped it in the first case and did not list it
// in the second).
func TestExportAfterAcknowledgeWaitsForReleasedRuns(t *testing.T) {
	store, err := transcriptstore.Open(t.TempDir())
	require.NoError(t, err)
	head := storedRollout(t, store)
	for _, listed := range []rollout.Phase{rollout.PhaseAwaitingAck, rollout.PhaseCompleted} {
		t.Run(string(listed), func(t *testing.T) {
			r := &releasedRun{t: t, listed: listed, res: &rollout.Result{RolloutID: "a1-0007", Set: "a1", Env: "counter", Reward: 1, Turns: 2, Head: head}}
			var out bytes.Buffer
			stats, err := exportSet(t.Context(), r.client(), store, "a1", &out, ExportOptions{})
			require.NoError(t, err)
			assert.Equal(t, ExportStats{Completed: 1}, stats, "the released rollout is exported once closed\n%s", out.String())
			assert.True(t, r.closed.Load(), "its close was awaited")
			var line ExportLine
			require.NoError(t, json.Unmarshal(out.Bytes(), &line), "%s", out.String())
			assert.Equal(t, "completed", line.Status)
			assert.False(t, line.Held, "no longer held")
		})
	}
}
