package bookkeeping_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/turnstile-rl/turnstile/activities/bookkeeping"
	"github.com/turnstile-rl/turnstile/internal/testsupport"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// fakeTemporal is the part of a Temporal client the group activities use:
// update-with-start against one ledger that may be closed, reading a closed
// ledger's result, and cancelling workflows.
type fakeTemporal struct {
	client.Client
	mu        sync.Mutex
	closed    *rollout.GroupState // the ledger closed with this state
	starts    []startedLedger     // update-with-start calls that got through
	cancelled []string
	missing   map[string]bool // workflow IDs that do not exist
	startErr  error           // every update-with-start fails with it
}

type startedLedger struct {
	reuse enumspb.WorkflowIdReusePolicy
	input rollout.GroupInput
}

type fakeStartOp struct {
	opts  client.StartWorkflowOptions
	input rollout.GroupInput
}

// report is a report of repeat of group g of set s (3 members, budget 1).
func report(repeat, attempt int, kind string, retryable bool) rollout.GroupReport {
	id := rollout.GroupRolloutID("s", "g", repeat)
	return rollout.GroupReport{Set: "s", Group: "g", Size: 3, Budget: 1, RolloutID: id, Repeat: repeat, Attempt: attempt,
		Kind: kind, Retryable: retryable, Reason: fmt.Sprintf("%s of attempt %d", kind, attempt)}
}

func (fakeStartOp) Get(context.Context) (client.WorkflowRun, error) { return nil, nil }

func (f *fakeTemporal) NewWithStartWorkflowOperation(opts client.StartWorkflowOptions, _ any, args ...any) client.WithStartWorkflowOperation {
	return fakeStartOp{opts: opts, input: args[0].(rollout.GroupInput)}
}

func (f *fakeTemporal) UpdateWithStartWorkflow(_ context.Context, o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	op := o.StartWorkflowOperation.(fakeStartOp)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	if f.closed != nil && op.opts.WorkflowIDReusePolicy == enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("Workflow execution already finished", "", "")
	}
	f.starts = append(f.starts, startedLedger{reuse: op.opts.WorkflowIDReusePolicy, input: op.input})
	r := o.UpdateOptions.Args[0].(rollout.GroupReport)
	return verdictHandle{rollout.GroupVerdict{Status: rollout.GroupRunning, Granted: &rollout.GroupGrant{RolloutID: r.RolloutID, Attempt: r.Attempt + 1}}}, nil
}

func (f *fakeTemporal) GetWorkflow(_ context.Context, workflowID, _ string) client.WorkflowRun {
	return closedLedger{state: f.closed}
}

func (f *fakeTemporal) CancelWorkflow(_ context.Context, workflowID, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing[workflowID] {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	f.cancelled = append(f.cancelled, workflowID)
	return nil
}

type verdictHandle struct{ v rollout.GroupVerdict }

func (verdictHandle) WorkflowID() string { return "" }
func (verdictHandle) RunID() string      { return "" }
func (verdictHandle) UpdateID() string   { return "" }
func (h verdictHandle) Get(_ context.Context, out any) error {
	*out.(*rollout.GroupVerdict) = h.v
	return nil
}

type closedLedger struct {
	client.WorkflowRun
	state *rollout.GroupState
}

func (c closedLedger) Get(_ context.Context, out any) error {
	if c.state == nil {
		return &temporal.WorkflowExecutionError{}
	}
	*out.(*rollout.GroupState) = *c.state
	return nil
}

func groupActivityEnv(f *fakeTemporal) *testsuite.TestActivityEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(&bookkeeping.GroupActivities{Client: f, TaskQueue: "q"})
	return env
}

func reportVerdict(t *testing.T, env *testsuite.TestActivityEnvironment, r rollout.GroupReport) rollout.GroupVerdict {
	t.Helper()
	val, err := env.ExecuteActivity(rollout.ReportToGroupName, r)
	require.NoError(t, err)
	var v rollout.GroupVerdict
	require.NoError(t, val.Get(&v))
	return v
}

// TestReportToGroup: a report goes to the running (or new) ledger; a closed
// failed ledger answers from its result without starting again; a closed
// complete one is reopened from its final state; a report no ledger could
// accept is refused before any call.
func TestReportToGroup(t *testing.T) {
	r := report(1, 0, rollout.ReportFailure, true)

	f := &fakeTemporal{}
	v := reportVerdict(t, groupActivityEnv(f), r)
	require.NotNil(t, v.Granted)
	require.Len(t, f.starts, 1)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, f.starts[0].reuse)
	require.Equal(t, rollout.GroupInput{Set: "s", Group: "g", Size: 3, Budget: 1}, f.starts[0].input)

	failed := &rollout.GroupState{Set: "s", Group: "g", Size: 3, Status: rollout.GroupFailed, Reason: "budget spent", Members: make([]rollout.MemberState, 3)}
	f = &fakeTemporal{closed: failed}
	v = reportVerdict(t, groupActivityEnv(f), r)
	require.Equal(t, rollout.GroupVerdict{Status: rollout.GroupFailed, Reason: "budget spent"}, v)
	require.Empty(t, f.starts, "a failed group is never started again")

	complete := &rollout.GroupState{Set: "s", Group: "g", Size: 3, Status: rollout.GroupComplete, Members: make([]rollout.MemberState, 3)}
	f = &fakeTemporal{closed: complete}
	v = reportVerdict(t, groupActivityEnv(f), r)
	require.NotNil(t, v.Granted)
	require.Len(t, f.starts, 1)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, f.starts[0].reuse)
	require.Equal(t, complete, f.starts[0].input.Prior, "reopened from the closed run's state")

	// A namespace without the ledger's search attribute: retrying cannot
	// help, so the report fails at once, naming the fix.
	f = &fakeTemporal{startErr: serviceerror.NewInvalidArgument("search attribute RolloutGroupStatus is not defined")}
	_, err := groupActivityEnv(f).ExecuteActivity(rollout.ReportToGroupName, r)
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "starter setup"})

	bad := r
	bad.Repeat = 3
	f = &fakeTemporal{}
	_, err = groupActivityEnv(f).ExecuteActivity(rollout.ReportToGroupName, bad)
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "repeat 3 is outside"})
	require.Empty(t, f.starts)
}

// TestCancelGroupMembers: the named members' workflows are cancelled by
// their derived ids; one already closed is counted, not an error.
func TestCancelGroupMembers(t *testing.T) {
	f := &fakeTemporal{missing: map[string]bool{rollout.WorkflowID("s-g-r2"): true}}
	val, err := groupActivityEnv(f).ExecuteActivity(rollout.CancelGroupMembersName,
		rollout.CancelGroupMembersInput{Set: "s", Group: "g", Repeats: []int{0, 2, 3}, Reason: "budget spent"})
	require.NoError(t, err)
	var res rollout.CancelGroupMembersResult
	require.NoError(t, val.Get(&res))
	require.Equal(t, rollout.CancelGroupMembersResult{Cancelled: 2, Closed: 1}, res)
	sort.Strings(f.cancelled)
	require.Equal(t, []string{"rollout/s-g-r0", "rollout/s-g-r3"}, f.cancelled)

	_, err = groupActivityEnv(f).ExecuteActivity(rollout.CancelGroupMembersName,
		rollout.CancelGroupMembersInput{Set: "s", Group: "g", Repeats: []int{-1}})
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "repeat -1 out of range"})
}
