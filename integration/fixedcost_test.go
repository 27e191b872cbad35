package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/api/enums/v1"

	"github.com/turnstile-rl/turnstile/trainer"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// runCost is what one run's history records.
type runCost struct {
	events, bytes int
	// upserts are UpsertWorkflowSearchAttributes events: with the run's
	// start and close, its writes to the visibility store.
	upserts int
	// markers by name: "Version" (workflow.GetVersion), "LocalActivity".
	markers map[string]int
	// localActivities by activity type.
	localActivities map[string]int
	types           []string
}

// visibilityWrites counts the run's start, its upserts and its close.
func (rc runCost) visibilityWrites() int { return 2 + rc.upserts }

// costOf reads a closed run's history and counts what it recorded.
func (c *cluster) costOf(ctx context.Context, workflowID, runID string) runCost {
	c.t.Helper()
	iter := c.client.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	rc := runCost{markers: map[string]int{}, localActivities: map[string]int{}}
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(c.t, err)
		rc.events++
		rc.bytes += protoSize(ev)
		name := ev.GetEventType().String()
		switch ev.GetEventType() {
		case enums.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			rc.upserts++
		case enums.EVENT_TYPE_MARKER_RECORDED:
			m := ev.GetMarkerRecordedEventAttributes()
			rc.markers[m.GetMarkerName()]++
			name += " " + m.GetMarkerName()
			if p := m.GetDetails()["data"].GetPayloads(); m.GetMarkerName() == "LocalActivity" && len(p) > 0 {
				typ := localActivityType(p[0].GetData())
				rc.localActivities[typ]++
				name += " " + typ
			}
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			name += " " + ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
		}
		rc.types = append(rc.types, fmt.Sprintf("%s (%d B)", name, protoSize(ev)))
	}
	return rc
}

// localActivityType reads the activity type out of a local activity
// marker's data (the SDK's own JSON).
func localActivityType(data []byte) string {
	const key = `"ActivityType":"`
	s := string(data)
	i := strings.Index(s, key)
	if i < 0 {
		return "?"
	}
	s = s[i+len(key):]
	return s[:strings.IndexByte(s, '"')]
}

// Fixed-cost bounds of a 4-turn counter rollout (3 tool calls and the final
// answer), as the trainer starts it (progress attributes on): see
// docs/performance.md. Events: the start, 5 workflow tasks, 4 model
// activities, 5 environment calls (seed, 3 tool calls, verify: one marker
// each), 2 upserts and the close.
const (
	fixedCostMaxEvents       = 36
	fixedCostMaxVisibility   = 4
	fixedCostMaxBytesPerTurn = 2560
)

// TestRolloutFixedCost records a real 4-turn counter rollout's history on
// the dev server and checks its fixed cost: no version marker, no local
// activity beyond the environment calls (the set fence is checked inside
// the seed), two search-attribute upserts ("model" after the seed, and the
// end: with the start and the close, four visibility writes), and the event
// and byte counts that follow. Event counts are deterministic; the bytes
// vary by a few with ids and times.
func TestRolloutFixedCost(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	c := newStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	in := counterInput("cost", 0, 3)
	in.ProgressAttributes = true // as the trainer submits on a namespace with them
	run, err := c.client.ExecuteWorkflow(ctx, rollout.StartOptions(in, rollout.TaskQueue), rollout.WorkflowName, in)
	require.NoError(t, err)
	var res rollout.Result
	require.NoError(t, run.Get(ctx, &res))
	require.Equal(t, 4, res.Turns, "a 4-turn rollout")
	rc := c.costOf(ctx, run.GetID(), run.GetRunID())
	for i, ev := range rc.types {
		t.Logf("%2d %s", i+1, ev)
	}
	t.Logf("4-turn counter rollout: %d events, %d bytes (%d per turn), %d upserts (%d visibility writes), markers %v, local activities %v",
		rc.events, rc.bytes, rc.bytes/res.Turns, rc.upserts, rc.visibilityWrites(), rc.markers, rc.localActivities)

	require.Zero(t, rc.markers["Version"], "version markers recorded")
	require.Equal(t, map[string]int{rollout.StartEnvironmentName: 1, rollout.OperateEnvironmentName: 3, rollout.VerifyName: 1},
		rc.localActivities, "local activities beyond the environment calls")
	require.Equal(t, 2, rc.upserts, "search-attribute upserts")
	require.LessOrEqual(t, rc.visibilityWrites(), fixedCostMaxVisibility)
	require.LessOrEqual(t, rc.events, fixedCostMaxEvents)
	require.LessOrEqual(t, rc.bytes, fixedCostMaxBytesPerTurn*res.Turns, "history bytes")
}

// TestRestoredRunsStartEagerly: a restore starts its runs from inside the
// worker (StartRollouts' starter) with eager workflow start, so each run's
// first workflow task is handed to the worker with the start: it is the
// task the start request itself started (its request id is the start's),
// not one a poller took from the task queue. The first task only parks the
// run for its checkpoint: it records no marker and no upsert (the start
// published the parked phase).
func TestRestoredRunsStartEagerly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := newStack(t, "--latency", "200ms")
	const set, n = "eager", 3
	tc, root := cutSet(ctx, t, c, set, "k1", n, false)
	res, err := tc.Restore(ctx, trainer.RestoreRequest{CheckpointID: "k1", Root: root, Participants: []string{c.envURL}}, true)
	require.NoError(t, err, "restore")
	require.Equal(t, n, res.Started, "restored runs started: %+v", res)
	for i := range n {
		id := rollout.WorkflowID(rollout.SubmittedID(set, i))
		var r rollout.Result
		require.NoError(t, c.client.GetWorkflow(ctx, id, "").Get(ctx, &r))
		require.Equal(t, 1, r.Attempt)
		d, err := c.client.DescribeWorkflow(ctx, id, "")
		require.NoError(t, err)
		desc := d.RawResponse
		var startRequest string
		for reqID, info := range desc.GetWorkflowExtendedInfo().GetRequestIdInfos() {
			if info.GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED {
				startRequest = reqID
			}
		}
		require.NotEmpty(t, startRequest, "%s: the start's request id", id)
		first, firstTask := c.firstTask(ctx, id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
		require.Equal(t, startRequest, first, "%s: its first workflow task was not started by its start request (not eager)", id)
		require.Equal(t, []string{enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED.String()}, firstTask, "%s: what its first task recorded", id)
	}
}

// firstTask returns the request id of a run's first WorkflowTaskStarted
// event and the events from its completion up to the next task.
func (c *cluster) firstTask(ctx context.Context, workflowID, runID string) (string, []string) {
	c.t.Helper()
	iter := c.client.GetWorkflowHistory(ctx, workflowID, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var requestID string
	var recorded []string
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(c.t, err)
		switch {
		case ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_STARTED && requestID == "":
			requestID = ev.GetWorkflowTaskStartedEventAttributes().GetRequestId()
		case requestID == "":
		case ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED ||
			ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED ||
			ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ADMITTED:
			return requestID, recorded
		default:
			recorded = append(recorded, ev.GetEventType().String())
		}
	}
	return requestID, recorded
}
