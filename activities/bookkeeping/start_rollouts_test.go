package bookkeeping_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// runs is Temporal's view of the rollouts' workflow ids: the attempt of
// each one's current run, and whether it runs.
type runs struct {
	mu      sync.Mutex
	attempt map[string]int
	running map[string]bool
}

func newRuns() *runs { return &runs{attempt: map[string]int{}, running: map[string]bool{}} }

func (r *runs) client() *temporalfake.Client {
	return &temporalfake.Client{Execute: r.execute, Describe: r.describe}
}

// execute starts a run as the server would under rollout.StartOptions'
// policies: an id used before refuses attempt 0, and a running run refuses
// any start.
func (r *runs) execute(o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	in := args[0].(rollout.Input)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, used := r.attempt[o.ID]; used && (in.Attempt == 0 || r.running[o.ID]) {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", "")
	}
	r.attempt[o.ID], r.running[o.ID] = in.Attempt, true
	return temporalfake.Run{ID: o.ID}, nil
}

func (r *runs) describe(workflowID, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.attempt[workflowID]
	if !ok {
		return nil, serviceerror.NewNotFound(workflowID)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		SearchAttributes: &commonpb.SearchAttributes{IndexedFields: map[string]*commonpb.Payload{
			rollout.SARolloutAttempt: temporalfake.Payload(a),
		}},
	}}, nil
}

func startInput(i, attempt int) rollout.Input {
	return rollout.Input{
		RolloutID: fmt.Sprintf("s-%04d", i), Set: "s", Attempt: attempt, Task: json.RawMessage(`{"target":2}`),
		Env: rollout.EnvRef{Name: "counter"}, Policy: rollout.PolicyRef{Model: "scripted-counter"},
	}
}

func startRollouts(t *testing.T, tc *temporalfake.Client, in rollout.StartRolloutsInput) (rollout.StartRolloutsResult, error) {
	t.Helper()
	acts := &bookkeeping.StartActivities{Starter: &bookkeeping.EagerStarter{Client: tc, TaskQueue: "rollouts"}}
	val, err := testsupport.NewActivityEnv(acts).ExecuteActivity(rollout.StartRolloutsName, in)
	if err != nil {
		return rollout.StartRolloutsResult{}, err
	}
	var res rollout.StartRolloutsResult
	require.NoError(t, val.Get(&res))
	return res, nil
}

// StartRollouts starts every input with eager start on the worker's
// rollout queue, with the memo asked; a retried batch finds its runs
// existing and starts nothing twice.
func TestStartRolloutsEagerAndIdempotent(t *testing.T) {
	r := newRuns()
	tc := r.client()
	in := rollout.StartRolloutsInput{Inputs: []rollout.Input{startInput(0, 0), startInput(1, 0), startInput(2, 0)},
		Memo: map[string]any{"submit": "stamp-1"}}
	res, err := startRollouts(t, tc, in)
	require.NoError(t, err)
	require.Equal(t, []string{"s-0000", "s-0001", "s-0002"}, res.Started)
	require.Empty(t, res.Existing)
	for _, o := range tc.Starts() {
		require.True(t, o.EnableEagerStart, "%s started without eager start", o.ID)
		require.Equal(t, "rollouts", o.TaskQueue)
		require.Equal(t, "stamp-1", o.Memo["submit"])
		require.Equal(t, "counter", o.Memo[rollout.MemoEnv], "StartOptions' memo kept")
	}

	res, err = startRollouts(t, tc, in)
	require.NoError(t, err)
	require.Empty(t, res.Started)
	require.Equal(t, []string{"s-0000", "s-0001", "s-0002"}, res.Existing)
}

// A later attempt (a restore's) starts unless a run of it or of a later
// attempt exists; a run of an earlier attempt still running is an error to
// retry, not a start.
func TestStartRolloutsLaterAttempts(t *testing.T) {
	r := newRuns()
	tc := r.client()
	r.attempt[rollout.WorkflowID("s-0001")] = 2 // attempt 2 ran already
	r.attempt[rollout.WorkflowID("s-0002")] = 5 // a later restore's
	r.attempt[rollout.WorkflowID("s-0003")] = 1 // closed: replaced now
	res, err := startRollouts(t, tc, rollout.StartRolloutsInput{Inputs: []rollout.Input{
		startInput(0, 2), startInput(1, 2), startInput(2, 2), startInput(3, 2),
	}, InOrder: true})
	require.NoError(t, err)
	require.Equal(t, []string{"s-0000", "s-0003"}, res.Started)
	require.Equal(t, []string{"s-0001"}, res.Existing)
	require.Equal(t, []string{"s-0002"}, res.Superseded)
	var order []string
	for _, o := range tc.Starts() {
		order = append(order, o.ID)
	}
	require.Equal(t, []string{rollout.WorkflowID("s-0000"), rollout.WorkflowID("s-0003")}, order, "in input order")

	r.attempt[rollout.WorkflowID("s-0004")], r.running[rollout.WorkflowID("s-0004")] = 1, true
	_, err = startRollouts(t, tc, rollout.StartRolloutsInput{Inputs: []rollout.Input{startInput(4, 2)}})
	require.ErrorContains(t, err, "a run of an earlier attempt is still running")
}

// A batch no run could start from is refused whole, before anything
// starts, with an error naming what was wrong.
func TestStartRolloutsRefusesBadBatches(t *testing.T) {
	big := make([]rollout.Input, rollout.MaxStartBatch+1)
	for i := range big {
		big[i] = startInput(i, 0)
	}
	noEnv := startInput(1, 0)
	noEnv.Env.Name = ""
	for _, tc := range []struct {
		name   string
		inputs []rollout.Input
		want   string
	}{
		{"too many", big, fmt.Sprintf("at most %d a batch", rollout.MaxStartBatch)},
		{"twice", []rollout.Input{startInput(0, 0), startInput(0, 0)}, "rollout s-0000 is in the batch twice"},
		{"no environment", []rollout.Input{startInput(0, 0), noEnv}, "rollout s-0001 names no environment"},
		{"no id", []rollout.Input{{}}, "input 0: empty rollout id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newRuns().client()
			_, err := startRollouts(t, fake, rollout.StartRolloutsInput{Inputs: tc.inputs})
			testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: tc.want})
			require.Empty(t, fake.Starts())
		})
	}
}
