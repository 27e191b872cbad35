package bookkeeping_test

import (
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
	"github.com/turnstile-rl/turnstile/internal/testsupport/temporalfake"
	"github.com/turnstile-rl/turnstile/workflows/rollout"
)

// ledger is one group's ledger as the group activities reach it through
// Temporal: update-with-start against it (it may have closed), its closed
// run's result, and cancelling workflows.
type ledger struct {
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

// client is a Temporal client answering from the ledger.
func (f *ledger) client() *temporalfake.Client {
	return &temporalfake.Client{UpdateWithStart: f.updateWithStart, GetRun: f.run, Cancel: f.cancel}
}

func (f *ledger) updateWithStart(o client.UpdateWithStartWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	op := o.StartWorkflowOperation.(*temporalfake.StartOperation)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return nil, f.startErr
	}
	if f.closed != nil && op.Options.WorkflowIDReusePolicy == enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("Workflow execution already finished", "", "")
	}
	f.starts = append(f.starts, startedLedger{reuse: op.Options.WorkflowIDReusePolicy, input: op.Args[0].(rollout.GroupInput)})
	r := o.UpdateOptions.Args[0].(rollout.GroupReport)
	return temporalfake.UpdateHandle{Value: rollout.GroupVerdict{Status: rollout.GroupRunning, Granted: &rollout.GroupGrant{RolloutID: r.RolloutID, Attempt: r.Attempt + 1}}}, nil
}

// run is the ledger's closed run: its final state, or a failure when it
// has not closed.
func (f *ledger) run(string, string) client.WorkflowRun {
	if f.closed == nil {
		return temporalfake.Run{Err: &temporal.WorkflowExecutionError{}}
	}
	return temporalfake.Run{Value: f.closed}
}

func (f *ledger) cancel(workflowID, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing[workflowID] {
		return serviceerror.NewNotFound("workflow execution already completed")
	}
	f.cancelled = append(f.cancelled, workflowID)
	return nil
}

func groupActivityEnv(f *ledger) *testsuite.TestActivityEnvironment {
	return testsupport.NewActivityEnv(&bookkeeping.GroupActivities{Client: f.client(), TaskQueue: "q"})
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
	r := testsupport.GroupReport(1, 0, rollout.ReportFailure, true)

	f := &ledger{}
	v := reportVerdict(t, groupActivityEnv(f), r)
	require.NotNil(t, v.Granted)
	require.Len(t, f.starts, 1)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, f.starts[0].reuse)
	require.Equal(t, rollout.GroupInput{Set: "s", Group: "g", Size: 3, Budget: 1}, f.starts[0].input)

	failed := &rollout.GroupState{Set: "s", Group: "g", Size: 3, Status: rollout.GroupFailed, Reason: "budget spent", Members: make([]rollout.MemberState, 3)}
	f = &ledger{closed: failed}
	v = reportVerdict(t, groupActivityEnv(f), r)
	require.Equal(t, rollout.GroupVerdict{Status: rollout.GroupFailed, Reason: "budget spent"}, v)
	require.Empty(t, f.starts, "a failed group is never started again")

	complete := &rollout.GroupState{Set: "s", Group: "g", Size: 3, Status: rollout.GroupComplete, Members: make([]rollout.MemberState, 3)}
	f = &ledger{closed: complete}
	v = reportVerdict(t, groupActivityEnv(f), r)
	require.NotNil(t, v.Granted)
	require.Len(t, f.starts, 1)
	require.Equal(t, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, f.starts[0].reuse)
	require.Equal(t, complete, f.starts[0].input.Prior, "reopened from the closed run's state")

	// A namespace without the ledger's search attribute: retrying cannot
	// help, so the report fails at once, naming the fix.
	f = &ledger{startErr: serviceerror.NewInvalidArgument("search attribute RolloutGroupStatus is not defined")}
	_, err := groupActivityEnv(f).ExecuteActivity(rollout.ReportToGroupName, r)
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "starter setup"})

	bad := r
	bad.Repeat = 3
	f = &ledger{}
	_, err = groupActivityEnv(f).ExecuteActivity(rollout.ReportToGroupName, bad)
	testsupport.CheckError(t, err, testsupport.ErrorWant{Type: rollout.ErrBadInput, NonRetryable: true, Contains: "repeat 3 is outside"})
	require.Empty(t, f.starts)
}

// TestCancelGroupMembers: the named members' workflows are cancelled by
// their derived ids; one already closed is counted, not an error.
func TestCancelGroupMembers(t *testing.T) {
	f := &ledger{missing: map[string]bool{rollout.WorkflowID("s-g-r2"): true}}
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
